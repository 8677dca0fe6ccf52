"""Process setup shared by the benchmark scripts; import it before anything that loads numpy or torch.

One BLAS thread (numpy's pool otherwise fights torch's for the same cores), no tokenizer
threads, no hub look-ups, and the repository root on sys.path. The scripts' own folder
is already first on sys.path when they run, so `import _setup` finds this file.
"""

import os
import sys
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(1, str(REPO_ROOT))
