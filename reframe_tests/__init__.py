"""hpcvar's ReFrame suite. A package, so its tests import the shared parts (``common``)
relatively: ReFrame (4.6 and later) loads a test file's parent packages first."""
