"""dask-jobqueue's SLURMCluster scales to two workers, runs a task, and scales back to none.

python dask_driver.py LOG_DIR [PARTITION]: berth's tests and bench/slurm-tools.sh.
"""
import sys
import time

from dask_jobqueue import SLURMCluster
from distributed import Client

partition = sys.argv[2] if len(sys.argv) > 2 else "default"
cluster = SLURMCluster(cores=1, memory="512MiB", processes=1, walltime="00:10:00", queue=partition,
    scheduler_options={"host": "127.0.0.1"}, log_directory=sys.argv[1], python=sys.executable)
cluster.scale(2)
client = Client(cluster)
client.wait_for_workers(2, timeout=120)
print("workers", len(client.scheduler_info()["workers"]), flush=True)
print("sum", client.submit(lambda x: x + 1, 41).result(), flush=True)
cluster.scale(0)
deadline = time.time() + 120
while time.time() < deadline and client.scheduler_info()["workers"]:
    time.sleep(0.5)
print("after", len(client.scheduler_info()["workers"]), flush=True)
client.close()
cluster.close()
