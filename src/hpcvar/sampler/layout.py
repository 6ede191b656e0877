"""The node counter file's fixed strings, shared by the sampler (writer) and its reader.

Kept free of heavy imports so that the sampler process starts in a fraction of a second; the
format itself is documented in :mod:`hpcvar.parsers.node_counters`.
"""

MAGIC = "# hpcvar node counters v1"
COLUMNS = ("epoch", "source", "device", "counter", "value")
UNITS = ("net *_bytes bytes, *_packets packets; infiniband port_xmit_data/port_rcv_data 4-byte words, "
         "port_xmit_wait ticks; cxi as the Cassini telemetry counts; psi microseconds; all values cumulative "
         "since boot")
