"""Serving under MLPerf LoadGen: requests of mixed length arriving at random, batched by a
policy, run by one system under test, measured by LoadGen (``mlperf_loadgen``).

- ``requests``: the query sample library's lengths (the ByteTransformer mix or a histogram);
- ``batching``: dynamic batching with a window, padded or within length buckets;
- ``loadgen``: one LoadGen run of a scenario and the numbers of its summary log;
- ``search``: the highest Server QPS whose run is VALID, by bisection, every trial kept.
"""
