"""The live dashboard through a whole session, for N minutes: what the browser receives per second,
Chromium's and the kernel's memory over time, the kernel's CPU share spent on the live plots, the
time from a click on a switch (and on Stop) to the page saying so, and each layer's verdict from the
Run beside a `compare` of it. At the end, the kernel's memory growth per minute after the first
minute (`run_memory.growth_report`): the goal is under 2 MB a minute, under 100 MB an hour.

The same scenario as tests/browser/test_soak.py (tests/browser/soak.py): JupyterLab 4 on 127.0.0.1
and Debian's chromium through Playwright, the default model, one core kept busy by another process,
SiLU switched off and on every 30 s.

    .venv/bin/python bench/dashboard_soak.py --minutes 10
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "browser"))

from lab_server import CHROMIUM_ARGS, shut_down_kernels, start_lab
from run_memory import cpu_name, growth_report
from soak import busy_core, soak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="how long the Run goes (default 10)")
    parser.add_argument("--no-busy", action="store_true", help="no second process keeping a core busy")
    args = parser.parse_args()

    from playwright.sync_api import sync_playwright

    from kernel_explorer.build.builder import build_hub

    build_hub(progress=False)  # the lab's kernel finds the bundled kernels built, as after make setup
    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    if executable is None:
        sys.exit("needs Debian's chromium: apt-get install -y chromium (make browser)")
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    with (
        tempfile.TemporaryDirectory() as root,
        start_lab("jupyterlab", Path(root)) as lab,
        sync_playwright() as playwright,
    ):
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        page = browser.new_context(viewport={"width": 1280, "height": 1000}).new_page()
        try:
            if args.no_busy:
                result = soak(lab, page, args.minutes)
            else:
                with busy_core():
                    result = soak(lab, page, args.minutes)
            result.busy_load = (
                "no busy process" if args.no_busy else "one core kept busy by a second process"
            ) + f"; load average after {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
        finally:
            browser.close()
            shut_down_kernels(lab)
    print(result.report())
    for verdicts in result.verdicts:
        agree, why = verdicts.agree()
        print(f"  {verdicts.layer}: {'agree' if agree else 'DISAGREE: ' + why}")
    print(f"the kernel's memory ({cpu_name()}):")
    for line in growth_report([(s.seconds, s.kernel_mb) for s in result.samples], "kernel RSS"):
        print(f"  {line}")


if __name__ == "__main__":
    main()
