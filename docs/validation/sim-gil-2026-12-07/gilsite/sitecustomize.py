"""Sets CPython's GIL switch interval in every process that starts with this folder on its
PYTHONPATH (GIL_SWITCH_S seconds; the default is 0.005) and notes it, with the process id, in
GIL_LOG_DIR/switch.txt. For vLLM's API server and the engine core it spawns (issue 14)."""
import os
import sys

_s = os.environ.get("GIL_SWITCH_S")
if _s:
    sys.setswitchinterval(float(_s))
    _d = os.environ.get("GIL_LOG_DIR")
    if _d:
        try:
            with open(os.path.join(_d, "switch.txt"), "a") as fh:
                fh.write(f"{os.getpid()} {sys.getswitchinterval()} {' '.join(sys.argv[:3])[:120]}\n")
        except OSError:
            pass
