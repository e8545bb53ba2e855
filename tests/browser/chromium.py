"""A headless Chromium for the report test: Debian's chromium and chromium-driver, installed
when missing (as root, with apt-get, as tests/slurm/local_slurm.sh installs Slurm); a machine
that cannot have them fails the test with the reason (it is never skipped)."""

import os
import shutil
import subprocess

import pytest

FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--window-size=1400,1000",
]  # fmt: skip


def ensure_installed() -> tuple[str, str]:
    from system_packages import INSTALL, NEEDED, UPDATE, wait_for_background_install

    wait_for_background_install()  # the session's, started when it began (a bare machine)
    found = shutil.which("chromium"), shutil.which("chromedriver")
    if all(found):
        return found
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.fail("Chromium is not installed and cannot be here (needs root and apt-get): "
                    "apt-get install chromium chromium-driver")  # fmt: skip
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = [*INSTALL.split(), *NEEDED[("chromium", "chromedriver")]]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if res.returncode != 0:
        subprocess.run(UPDATE.split(), capture_output=True, env=env)
        res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if res.returncode != 0:
        pytest.fail(f"cannot install Chromium: {res.stderr[-2000:]}")
    return shutil.which("chromium"), shutil.which("chromedriver")


def driver(tmp_path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser, chromedriver = ensure_installed()
    opts = webdriver.ChromeOptions()
    opts.binary_location = browser
    for flag in [*FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"]:
        opts.add_argument(flag)
    return webdriver.Chrome(service=Service(chromedriver), options=opts)
