#!/usr/bin/python3
"""A real single-node Slurm on this machine runs a sweep and a capacity search
through scripts/slurm_sweep.sh (a job array of shards and a dependent merge
job); the merged outputs must equal a local run's byte for byte.

The test starts munged, slurmctld and slurmd itself, with a generated
slurm.conf, key and state in a temporary folder and free ports, and stops
them at the end. Exit 3 (ctest: skipped) with the reason where Debian's
slurm-wlm and munge are not installed or the daemons cannot start.

Usage: slurm_test.py --servesim BIN --source-dir ROOT --work-dir DIR
"""
import argparse
import filecmp
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

SKIP = 3
BINARIES = ["/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/bin/sbatch", "/usr/bin/squeue",
            "/usr/bin/sinfo"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def skip(reason):
    print(f"skipped: {reason}")
    sys.exit(SKIP)


class Cluster:
    """munged + slurmctld + slurmd on this host, everything under `root`."""

    def __init__(self, root):
        self.root = root
        self.host = socket.gethostname().split(".")[0]
        self.env = dict(os.environ, SLURM_CONF=os.path.join(root, "slurm.conf"))
        self.pids = []

    def path(self, name):
        return os.path.join(self.root, name)

    def start(self):
        for d in ("state", "spool"):
            os.makedirs(self.path(d))
        with open(self.path("munge.key"), "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(self.path("munge.key"), 0o400)
        sock = self.path("munge.sock")
        self.run(["/usr/sbin/munged", "--force", f"--socket={sock}", f"--key-file={self.path('munge.key')}",
                  f"--pid-file={self.path('munged.pid')}", f"--log-file={self.path('munged.log')}",
                  f"--seed-file={self.path('munged.seed')}"], "munged")
        self.pids.append("munged.pid")
        conf = f"""ClusterName=servesimtest
SlurmctldHost={self.host}
SlurmUser={os.environ.get("USER", "root") if os.getuid() != 0 else "root"}
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
AuthType=auth/munge
AuthInfo=socket={sock}
CredType=cred/munge
StateSaveLocation={self.path("state")}
SlurmdSpoolDir={self.path("spool")}
SlurmctldPidFile={self.path("slurmctld.pid")}
SlurmdPidFile={self.path("slurmd.pid")}
SlurmctldLogFile={self.path("slurmctld.log")}
SlurmdLogFile={self.path("slurmd.log")}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
NodeName={self.host} CPUs={os.cpu_count()} State=UNKNOWN
PartitionName=test Nodes={self.host} Default=YES MaxTime=INFINITE State=UP
"""
        with open(self.path("slurm.conf"), "w") as f:
            f.write(conf)
        self.run(["/usr/sbin/slurmctld"], "slurmctld")
        self.pids.append("slurmctld.pid")
        self.run(["/usr/sbin/slurmd"], "slurmd")
        self.pids.append("slurmd.pid")
        deadline = time.time() + 30
        while time.time() < deadline:
            p = subprocess.run(["sinfo", "-h", "-o", "%t"], env=self.env, capture_output=True, text=True)
            if p.returncode == 0 and p.stdout.strip() in ("idle", "mix", "alloc"):
                return
            time.sleep(0.5)
        self.stop()
        skip(f"slurmd did not come up idle in 30 s (sinfo: {p.stdout.strip() or p.stderr.strip()}); "
             f"see {self.path('slurmctld.log')}")

    def run(self, argv, what):
        p = subprocess.run(argv, env=self.env, capture_output=True, text=True)
        if p.returncode != 0:
            self.stop()
            skip(f"{what} would not start here: {(p.stderr or p.stdout).strip()[:300]}")

    def stop(self):
        for name in reversed(self.pids):
            try:
                with open(self.path(name)) as f:
                    os.kill(int(f.read().strip()), 15)
            except (OSError, ValueError):
                pass
        self.pids = []
        time.sleep(0.5)


def check(condition, message):
    if not condition:
        print(f"FAILED: {message}")
        sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--servesim", required=True)
    ap.add_argument("--source-dir", required=True)
    ap.add_argument("--work-dir", required=True)
    args = ap.parse_args()
    missing = [b for b in BINARIES if not os.access(b, os.X_OK)]
    if missing:
        skip(f"Slurm is not installed ({', '.join(missing)} missing; Debian's slurm-wlm and munge, which "
             "scripts/install-deps.sh installs)")
    servesim = os.path.abspath(args.servesim)
    recipe = os.path.join(args.source_dir, "scripts", "slurm_sweep.sh")
    shutil.rmtree(args.work_dir, ignore_errors=True)
    os.makedirs(args.work_dir)
    root = tempfile.mkdtemp(prefix="servesim-slurm-")
    cluster = Cluster(root)
    cluster.start()
    try:
        sweep = ["--grid", "rate=2,4,8", "--grid", "max-num-seqs=8,64", "--objective", "max-goodput", "--",
                 "--num-requests", "80", "--slo-ttft", "500ms", "--slo-tpot", "30ms"]
        local = os.path.join(args.work_dir, "sweep_local")
        subprocess.run([servesim, "sweep", "--out", local, "-q", *sweep], check=True, capture_output=True)
        out = os.path.join(args.work_dir, "sweep_slurm")
        p = subprocess.run([recipe, "--shards", "3", "--out", out, "--servesim", servesim, "--wait", "--",
                            "sweep", *sweep], env=cluster.env, capture_output=True, text=True, timeout=240)
        print(p.stdout + p.stderr)
        check(p.returncode == 0, f"the recipe failed ({p.returncode})")
        check("array job" in p.stdout and "merge job" in p.stdout, "the recipe named no jobs")
        for name in ("sweep.csv", "sweep.json"):
            check(filecmp.cmp(os.path.join(local, name), os.path.join(out, name), shallow=False),
                  f"{name} through Slurm differs from the local run")
        for i in range(3):
            check(os.path.isfile(os.path.join(out, f"shard-{i}", "sweep.json")), f"shard {i} wrote nothing")

        search = ["--search", "--model", "llama-3.1-8b", "--num-requests", "120", "--slo-ttft", "1s",
                  "--slo-tpot", "50ms", "--seeds", "1", "--tolerance", "0.05",
                  "--search-tensor-parallel-size", "1,2", "--search-quantization", "none,fp8"]
        local = os.path.join(args.work_dir, "capacity_local")
        subprocess.run([servesim, "capacity", "--out", local, "-q", *search], check=True, capture_output=True)
        out = os.path.join(args.work_dir, "capacity_slurm")
        p = subprocess.run([recipe, "--shards", "2", "--out", out, "--servesim", servesim, "--wait", "--",
                            "capacity", *search], env=cluster.env, capture_output=True, text=True, timeout=240)
        print(p.stdout + p.stderr)
        check(p.returncode == 0, f"the capacity recipe failed ({p.returncode})")
        for name in ("search.csv", "capacity.json"):
            check(filecmp.cmp(os.path.join(local, name), os.path.join(out, name), shallow=False),
                  f"{name} through Slurm differs from the local run")
        # A failing shard: the merge never runs and --wait says so.
        p = subprocess.run([recipe, "--shards", "2", "--out", os.path.join(args.work_dir, "bad"), "--servesim",
                            servesim, "--wait", "--", "sweep", "--grid", "rate=2,4", "--", "--model", "nonesuch"],
                           env=cluster.env, capture_output=True, text=True, timeout=120)
        check(p.returncode != 0 and "a shard failed" in p.stderr, f"a failed shard went unnoticed: {p.stderr}")
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
    print("passed: sweep and capacity search through Slurm equal the local runs")


if __name__ == "__main__":
    main()
