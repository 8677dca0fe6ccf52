"""Run the `milvus` package's standalone server in the foreground: gRPC on 19530, health on 9091.

Data goes to /var/lib/milvus (compose mounts a volume there). SIGTERM stops the server process,
which the package's wrapper would otherwise ignore.
"""

import signal
import sys

from milvus import MilvusServer, MilvusServerConfig

server = MilvusServer(MilvusServerConfig(data_dir="/var/lib/milvus"), wait_for_started=False)
server.config.set("proxy_port", 19530)
server.webservice_port = 9091
server.start()
signal.signal(signal.SIGTERM, lambda *_: server.server_proc.terminate())
sys.exit(server.server_proc.wait())
