"""Container images of the ReFrame suite: one definition each (``containers/images.yaml``),
built here with Charliecloud from the package registry, recipes for Apptainer generated from the
same definition, and the store the suite's runs take them from.

* :mod:`~hpcvar.containers.definition`: the definitions, the build script both builders run, the
  Apptainer recipe;
* :mod:`~hpcvar.containers.build`: the Charliecloud build (``hpcvar containers build``);
* :mod:`~hpcvar.containers.store`: the store's layout, digests, and which image a run means;
* :mod:`~hpcvar.containers.runtime`: whether this machine can run or build images, and if not why.
"""
