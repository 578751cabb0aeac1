"""A real PostgreSQL server for the tests of shared state: Debian's package (`make postgres`), started in a
fresh folder on a Unix socket only (no TCP port), fsync off, stopped at the end; the tests that need it
skip, saying why, where it is not installed or cannot start."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest


def _binaries() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4]))
    which = shutil.which("pg_ctl")
    return Path(found[-1]).parent if found else Path(which).parent if which else None


class PostgresServer:
    def __init__(self):
        self.bin = _binaries()
        if self.bin is None:
            pytest.skip("PostgreSQL is not installed (make postgres, or apt-get install postgresql)")
        self.root = Path(tempfile.mkdtemp(prefix="mtkit-pg-"))
        self.prefix = []
        if os.geteuid() == 0:  # initdb refuses root: the package's postgres user runs it
            try:
                user = pwd.getpwnam("postgres")
            except KeyError:
                pytest.skip("PostgreSQL cannot start: running as root and there is no postgres user")
            os.chown(self.root, user.pw_uid, user.pw_gid)
            self.prefix = ["runuser", "-u", "postgres", "--"]
        self.data = self.root / "data"
        self._run("initdb", "-D", self.data, "-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C", "--no-sync")
        options = f"-k {self.root} -c listen_addresses='' -c fsync=off -c max_connections=200"
        self._run("pg_ctl", "-D", self.data, "-w", "-t", "120", "-o", options, "-l", self.root / "log", "start")
        self.url = f"postgresql://postgres@/postgres?host={self.root}"

    def _run(self, program: str, *args) -> None:
        command = [*self.prefix, str(self.bin / program), *map(str, args)]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            log = (self.root / "log").read_text() if (self.root / "log").exists() else ""
            pytest.skip(f"PostgreSQL cannot start: {program}: {(done.stderr or log).strip()[-300:]}")

    def database(self) -> str:
        """A new empty database's URL."""
        import psycopg

        name = f"t{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return f"postgresql://postgres@/{name}?host={self.root}"

    def stop(self) -> None:
        subprocess.run([*self.prefix, str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop"],
                       capture_output=True)  # fmt: skip
        shutil.rmtree(self.root, ignore_errors=True)
