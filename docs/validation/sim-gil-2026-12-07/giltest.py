"""The tokenizer worker against a busy event loop, on this machine's CPU (issue 14, 2026-12-07).

    python giltest.py TOKENIZER_DIR [SWITCH_S]

What vLLM 0.25.1's API server does with a prompt, without vLLM: a `transformers` fast
tokenizer called on a 1,024-token text (random ids decoded) in a second thread, while the
main thread runs Python without pause (an event loop with ready work always). Prints the
time per tokenisation alone, the main thread's work rate with and without the tokenizer
thread beside it, and the tokenisation's time beside the busy main thread, under CPython's
GIL switch interval SWITCH_S (default 0.005, CPython's own). Needs `transformers` and
`tokenizers` (the device's 0.23.2); no GPU, no vLLM.
"""

import random
import statistics
import sys
import threading
import time

from transformers import AutoTokenizer


def main() -> None:
    sys.setswitchinterval(float(sys.argv[2]) if len(sys.argv) > 2 else 0.005)
    tok = AutoTokenizer.from_pretrained(sys.argv[1])
    rng = random.Random(0)
    texts = [tok.decode([rng.randrange(1000, 150000) for _ in range(1024)]) for _ in range(50)]
    t0 = time.perf_counter()
    for t in texts:
        tok(t)
    alone = (time.perf_counter() - t0) / len(texts)

    def work(seconds: float) -> float:
        """Units of pure-Python work per second for `seconds`."""
        end, n = time.perf_counter() + seconds, 0
        while time.perf_counter() < end:
            sum(range(200))
            n += 1
        return n / seconds

    base = work(1.0)
    stop = threading.Event()
    beside: list[float] = []

    def tokenize_forever() -> None:
        while not stop.is_set():
            for t in texts:
                a = time.perf_counter()
                tok(t)
                beside.append(time.perf_counter() - a)
                if stop.is_set():
                    break

    th = threading.Thread(target=tokenize_forever)
    th.start()
    time.sleep(0.05)
    busy = work(2.0)
    stop.set()
    th.join()
    print(f"switch interval {sys.getswitchinterval()} s")
    print(f"tokenise alone: {alone * 1e3:.2f} ms per prompt")
    print(f"main thread: {busy / base:.2f} of its rate alone while the tokenizer thread runs")
    print(f"tokenise beside the busy main thread: median {statistics.median(beside) * 1e3:.2f} ms "
          f"({len(beside)} prompts)")


if __name__ == "__main__":
    main()
