"""The system model: the machine a campaign runs on.

- :mod:`hpcvar.system.topology`: node -> router -> group -> island, and a node list's placement;
- :mod:`hpcvar.system.aries`: Aries router counter names -> the paper's Table II, derived counters;
- :mod:`hpcvar.system.linkcounters`: the link counters of routers that are not Aries (the
  emulated cluster's links);
- :mod:`hpcvar.system.background`: the background traffic estimate ``b`` from the scheduler's
  accounting.
"""
