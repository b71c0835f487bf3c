"""Where and from what a study ran: the commit, whether the checkout's tracked
files differ from it, and the machine as its metadata.json names it
("<CPU model> (<cores> cores), <host name>")."""
import os
import platform
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def commit():
    """The short hash of the checkout's HEAD ('' outside a git checkout)."""
    return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()


def tracked_files_modified():
    """Whether the checkout's tracked files differ from its commit (the servesim built from it may too)."""
    return bool(subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip())


def machine():
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu} ({os.cpu_count()} cores), {platform.node()}"
