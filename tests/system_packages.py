"""Debian packages some tests need (Slurm for tests/test_slurm.py, Chromium for the report and
docs tests), installed in the background from the start of a test session on a machine that
lacks them (as root, with apt-get), so that the download and unpacking overlap the tests that
compute instead of stalling the test that needs them (on a bare CI machine: about a minute).

The session (conftest.pytest_configure, in the process that starts the test processes) takes an
exclusive lock and hands it to the installer, which holds it until it ends; a test that needs a
package waits for a shared lock, then looks for the package as before and installs it itself
if the background install failed (tests/slurm/local_slurm.sh, tests/browser/chromium.py)."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

# the commands each group provides, and its packages: without the packages these recommend
# (apt-get's default brings 158 packages, 538 MB, systemd, perl, avahi, cups and every Slurm
# plugin among them, where these need 36, 443 MB; Chromium renders with Liberation, which it
# only recommends)
NEEDED = {
    ("slurmctld", "munged"): ("slurm-wlm", "munge"),
    ("chromium", "chromedriver"): ("chromium", "chromium-driver", "fonts-liberation"),
}
# each waits for another apt-get's lock (the Slurm and Chromium tests may install at once)
INSTALL = "apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=600"
UPDATE = "apt-get update -q -o DPkg::Lock::Timeout=600"
LOCK_ENV = "NADPIPE_TESTS_APT_LOCK"  # the lock file, for the test processes
SBIN = os.pathsep.join(("/usr/local/sbin", "/usr/sbin", "/sbin"))  # munged, slurmctld


def missing() -> list[str]:
    """The packages whose commands are not on this machine."""
    path = os.pathsep.join((os.environ.get("PATH", ""), SBIN))
    found = lambda cmd: shutil.which(cmd, path=path)  # noqa: E731
    return [p for cmds, pkgs in NEEDED.items() if not all(map(found, cmds)) for p in pkgs]


def start_background_install(log_dir: Path) -> subprocess.Popen | None:
    """Install what is missing in the background, holding the lock; None when nothing is
    missing or this machine cannot install (not root, no apt-get: the tests say so)."""
    packages = missing()
    if not packages or os.geteuid() != 0 or not shutil.which("apt-get"):
        return None
    lock = os.path.join(tempfile.gettempdir(), f"nadpipe-tests-apt-{os.getpid()}.lock")
    os.environ[LOCK_ENV] = lock  # inherited by the test processes, started after this
    fd = os.open(lock, os.O_CREAT | os.O_RDWR, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)  # the installer's bash holds it too (the same open file)
    install = " ".join([INSTALL, *packages])
    # bash holds the lock until it ends; what it runs does not (a daemon a package starts
    # would hold it for ever)
    script = f"( {install} || {{ {UPDATE} && {install}; }} ) {fd}>&-"
    log = open(log_dir / "apt-install.log", "w")  # noqa: SIM115 -- the installer writes it
    proc = subprocess.Popen(
        ["bash", "-c", script],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        pass_fds=(fd,),
        start_new_session=True,  # a Ctrl-C of the tests does not cut dpkg off mid-way
    )
    os.close(fd)  # the installer's copy keeps the lock
    log.close()
    return proc


def wait_for_background_install() -> None:
    """Return once the session's background install (if any) has ended."""
    lock = os.environ.get(LOCK_ENV)
    if not lock or not os.path.exists(lock):
        return
    with open(lock) as f:
        fcntl.flock(f, fcntl.LOCK_SH)
