"""Parsl's SlurmProvider runs three apps on one block, then scales the idle block in.

python parsl_driver.py RUN_DIR [PARTITION]: berth's tests and bench/slurm-tools.sh.
"""
import sys
import time

import parsl
from parsl.config import Config
from parsl.executors import HighThroughputExecutor
from parsl.launchers import SingleNodeLauncher
from parsl.providers import SlurmProvider

partition = sys.argv[2] if len(sys.argv) > 2 else "default"
provider = SlurmProvider(partition=partition, nodes_per_block=1, init_blocks=1, min_blocks=0, max_blocks=1,
    walltime="00:10:00", cmd_timeout=30, launcher=SingleNodeLauncher(), exclusive=False,
    worker_init=f"export PATH={sys.prefix}/bin:$PATH")
executor = HighThroughputExecutor(label="berth", address="127.0.0.1", max_workers_per_node=1,
    cores_per_worker=1, provider=provider)
parsl.load(Config(executors=[executor], strategy="htex_auto_scale", max_idletime=3, run_dir=sys.argv[1]))


@parsl.python_app
def double(x):
    return 2 * x


print("results", [double(i).result() for i in range(3)], flush=True)
# An idle block is scaled in (its job cancelled) after max_idletime.
deadline = time.time() + 120
states = {}
while time.time() < deadline:
    states = {k: s.state.name for k, s in executor.status().items()}
    if states and all(s in ("SCALED_IN", "CANCELLED", "COMPLETED") for s in states.values()):
        break
    time.sleep(1)
print("blocks", sorted(states.values()), flush=True)
parsl.dfk().cleanup()
