"""The defaults every command shares, each stated once (issue 20, item 3): the CLI
options, the config models and the engine adapters read them from here.

Other shared facts live with the code that owns them and are imported from there:
the concurrency levels (``specdec.levels``), the ngram settings per engine
(``specdec.arms.NGRAM``), the demo's design (``specdec.demo_design``), the run
folder's layout (``specdec.runfolder``).
"""

from __future__ import annotations

from pathlib import Path

#: Model dtype of the replay's and the capture commands' vLLM servers (the demo's setting).
DTYPE = "bfloat16"
#: dtype where greedy outputs must not move with the batch: the stability probes and the tests'
#: servers (in bfloat16 a batch of another size can flip a near-tie token).
STABLE_DTYPE = "float32"
#: The embedded vLLM's --max-model-len, and llama-server's context per slot.
MAX_MODEL_LEN = 2048
#: The model name the embedded servers serve under (--served-model-name).
SERVED_MODEL = "specdec-target"
#: Longest wait, seconds, for an embedded server to become healthy.
STARTUP_TIMEOUT_S = 300.0
#: Parent folder of run folders, and the link to the newest one.
RUNS_DIR = Path("runs")
LATEST_RUN = RUNS_DIR / "latest"
