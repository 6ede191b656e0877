"""Helpers with no knowledge of campaigns, shared by every stage.

- :mod:`hpcvar.util.fileio`: atomic file writes;
- :mod:`hpcvar.util.naming`: file names made from data (``slug``);
- :mod:`hpcvar.util.progress`: progress lines on stderr for long steps;
- :mod:`hpcvar.util.anonymise`: salted pseudonyms for user names;
- :mod:`hpcvar.util.grids`: ``n`` ranks as a process grid, as square as possible;
- :mod:`hpcvar.util.cores`: the cores a step may spread over (collation, the forecaster).
"""
