"""Traffic, one room of the core: the traffic file's format (``raw``: its rows read as records,
before validation), its checked reader and Parquet writer (``io``), the importers of public
traces (``importers``), the prompt pool (``prompt_pool``), and the mix, draw and profile tools
(``mix``, ``profile``). The replay, the proxy, the data contracts and the CLI use it.

Reading a traffic file is one call: ``load_traffic(path)`` returns the checked ``Traffic``
(every row a ``TrafficRow``, its sha256 for the manifest), or raises an ``InputFileError``
naming the file, row and field of the first problem.
"""

from specdec.traffic.io import BUNDLED, Traffic, load_traffic, write_traffic_parquet

__all__ = ["BUNDLED", "Traffic", "load_traffic", "write_traffic_parquet"]
