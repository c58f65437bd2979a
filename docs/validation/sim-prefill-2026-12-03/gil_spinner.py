"""A tokenizer call next to a spinning Python thread: ms per call (issue 14: the GIL waits a
tokenizer worker pays while the event loop holds the GIL). Args: tokenizer dir, mode
(call | encode_batch | encode)."""
import sys, time, threading
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1])
import random
rng = random.Random(0)
p = tok.decode([rng.randrange(1000, 100000) for _ in range(1024)])
mode = sys.argv[2]
stop = False
def spinner():
    x = 0
    while not stop: x += 1
th = threading.Thread(target=spinner); th.start()
time.sleep(0.05)
fns = {"call": lambda: tok(p), "encode_batch": lambda: tok._tokenizer.encode_batch([p]),
       "encode": lambda: tok._tokenizer.encode(p), "encode_fast": lambda: tok._tokenizer.encode_batch_fast([p]) if hasattr(tok._tokenizer, "encode_batch_fast") else None}
ds = []
for _ in range(10):
    t0 = time.perf_counter(); fns[mode](); ds.append((time.perf_counter() - t0) * 1e3)
stop = True; th.join()
print(mode, "with spinner thread: ms", sorted(round(x, 1) for x in ds))
