#!/usr/bin/env python3
"""Takes the README's picture of the chat page (docs/images/chat_page.png) from a real exchange:
starts `fp8lm serve` on the shipped model in FP8 (weights and KV cache), opens the page in headless
Chromium (tests/python/browser.py: Debian's chromium + chromium-driver, through Selenium), sets a
system prompt and a seed, sends two messages, waits for the streamed replies, and saves the window.

  .venv-test/bin/python tools/screenshot_chat_page.py [--bin build/src/fp8lm] [--out docs/images/chat_page.png]

Needs what the Python tests need (tests/python/requirements.txt; scripts/test.sh installs it)."""
import argparse
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "python"))

import browser  # noqa: E402
from test_chat_page import fill, open_page, send  # noqa: E402
from test_serve import FP8, Server  # noqa: E402

SYSTEM = "You are a storyteller who writes in the manner of old books."
MESSAGES = ["Tell me about the sea.", "What did the old sailor say?"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.environ.get("FP8LM_BIN", str(REPO / "build" / "src" / "fp8lm")))
    ap.add_argument("--out", default=str(REPO / "docs" / "images" / "chat_page.png"))
    ap.add_argument("--width", type=int, default=1280)
    ap.add_argument("--height", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=7, help="the replies' sampling seed (the model's defaults otherwise)")
    args = ap.parse_args()

    server = Server(args.bin, *FP8, "--kv-cache-tokens", "4096")
    driver = browser.chromium(args.width, args.height)
    try:
        open_page(driver, server)
        fill(driver, "system", SYSTEM)
        fill(driver, "max_tokens", 60)
        fill(driver, "seed", args.seed)
        for text in MESSAGES:
            send(driver, text)
        driver.execute_script("document.activeElement.blur()")  # no focus ring in the picture
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        if not driver.save_screenshot(str(out)):
            sys.exit(f"could not write {out}")
        print(f"wrote {out}")
    finally:
        driver.quit()
        server.stop_cleanly()


if __name__ == "__main__":
    main()
