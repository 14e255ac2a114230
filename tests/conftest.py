"""Fixtures for tests against the lab (real sshd, pct and vLLM stand-ins, the real CLI).

Writing lab tests: which fixture
--------------------------------
Mark the test `lab` (`pytestmark = pytest.mark.lab`), then take one of:

- `lab`: a fresh lab of the test's own (one host, a pct and a direct-SSH container,
  nothing deployed), torn down by PID after the test. Take it whenever the test
  changes the lab: a deploy that changes or breaks anything, a rollback, faults, a
  stopped sshd, an edited inventory or known_hosts, a lock left behind. Indirect
  parametrization gives other LabSpec fields: `@pytest.mark.parametrize("lab",
  [{"vllm_version": "0.19.1"}], indirect=True)`.
- `shared_lab`: the same lab, running and not deployed, shared by every test of the
  session (of the pytest-xdist worker) that takes it. For tests that only read from
  it (pct exec, HTTP through the host, logins, discovery, doctor, render, a dry run
  or a refused deploy that writes nothing) or put back what they change (a container
  stopped and started again).
- `deployed_lab`: a shared lab with `qwen-dflash` deployed on every container (all
  at once, with `labtools.FAST`); its deploy document is `deployed_lab.deployed`. For
  tests that read a deployment (status, verify-config, render, a dry run with --diff,
  a deploy of the same inputs that changes nothing) or restore what they edit.

- `real_lab`: a lab whose one container (reached by pct) runs the real vLLM for CPUs
  (`--server vllm`), shared by the `realvllm` tests of the session. scripts/test runs
  them on two workers, one file each, in file order, since each server start costs
  35 s to minutes of CPU; the last test of test_realvllm_lab.py brings its lab down.
  Skipped, with the command to run, when the real server's venv is missing.

Every test gets its own `ORCH_STATE_DIR` (local history) in its tmp_path, shared lab
or not. Write anything you derive from a shared lab (an edited inventory, a
known_hosts to fill) to tmp_path, never into the lab's directory. After each test the
shared lab is compared with what the test found (`labtools.lab_state`: sshd and
server PIDs, container status and faults, every deployed file and link, inventory,
known_hosts): a test that left it changed fails, naming what changed, and the tests
after it get a new one. No test may rely on another having run before it.

scripts/test runs the suite on four pytest-xdist workers (`-n 4 --dist worksteal`);
each worker builds its own shared labs on first use, and lab networks are split
between workers (`labtools.free_network`). xdist hands out consecutive tests in
chunks, so keep the tests of a shared lab next to each other in their file
(`--dist loadgroup` would pin them to one worker, but xdist 3.8 groups nothing under
pytest 9.2: it renames `item._nodeid`, which pytest no longer reads). Tests run
beside others: give a timing bound slack for a busy machine. A test that loads the
machine itself past what others can bear beside it (the 16-container fleet) is marked
`alone` and runs after the pool, by itself.
"""

from __future__ import annotations

import glob
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conformance import VERSION
from labtools import ALL_AT_ONCE, FAST, LabHandle, changes, cli_env, lab_state, start_lab
from realvllm import real_lab_in
from releasefiles import release_files
from shelltools import Processes

from orchestrator.lab.cluster import Lab
from orchestrator.lab.paths import pid_alive


@pytest.fixture(scope="session")
def dist_stores_before() -> set[str]:
    """vLLM's torch.distributed stores in /tmp before any real server of the session."""
    return set(glob.glob("/tmp/vllm_dist_*"))


@pytest.fixture(scope="session")
def real_lab(
    tmp_path_factory: pytest.TempPathFactory, dist_stores_before: set[str]
) -> Iterator[LabHandle]:
    """A lab of one pct container serving with the real vLLM, shared by the session."""
    with real_lab_in(tmp_path_factory.mktemp("real")) as handle:
        yield handle


@pytest.fixture(scope="module")
def standin_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """A lab of one container whose stand-in claims the real lab's vLLM (the conformance
    tests compare the two), shared by one test module."""
    root = tmp_path_factory.mktemp("standin-0.32")
    the_lab = start_lab(root / "lab", vllm_version=VERSION, containers_per_host=1, direct_ssh=False)
    try:
        yield the_lab
    finally:
        the_lab.down()


def stop(lab: Lab) -> None:
    """Stop every process of the lab, by PID, and check that each one is gone."""
    stopped = lab.down()
    assert all(not pid_alive(pid) for pid in stopped)


@pytest.fixture
def lab(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[LabHandle]:
    """A fresh default lab of this test's own, torn down by PID."""
    the_lab = start_lab(tmp_path / "lab", **getattr(request, "param", {}))
    try:
        yield LabHandle(the_lab, cli_env(tmp_path / "state"))
    finally:
        stop(the_lab)


def deploy_everywhere(handle: LabHandle) -> LabHandle:
    """qwen-dflash deployed on every container of the lab at once; fails unless all are."""
    inventory = str(handle.inventory)
    result = handle.orch("deploy", "qwen-dflash", "-i", inventory, "--json", *FAST, *ALL_AT_ONCE)
    assert result.code == 0, str(result)
    return LabHandle(handle.lab, handle.env, result.json)


class SharedLabs:
    """The session's shared labs, each built on first use and lent to one test at a time."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.built: dict[str, LabHandle] = {}
        self.count = 0

    def lend(
        self, kind: str, prepare: Callable[[LabHandle], LabHandle], tmp_path: Path
    ) -> Iterator[LabHandle]:
        """The `kind` lab (made by `prepare` from a fresh one when there is none) with
        this test's own state dir; checked afterwards to be as the test found it."""
        if kind not in self.built:
            self.count += 1
            where = self.root / f"{kind}-{self.count}"
            handle = LabHandle(start_lab(where / "lab"), cli_env(where / "state"))
            try:
                self.built[kind] = prepare(handle)
            except BaseException:
                stop(handle.lab)
                raise
        shared = self.built[kind]
        before = lab_state(shared.lab)
        yield LabHandle(shared.lab, cli_env(tmp_path / "state"), shared.deployed)
        changed = changes(before, lab_state(shared.lab))
        if changed:
            del self.built[kind]
            stop(shared.lab)
            pytest.fail(
                f"the test left the shared {kind} lab changed (take `lab` for a test that "
                "changes it): " + "; ".join(changed[:10]),
                pytrace=False,
            )

    def close(self) -> None:
        for handle in self.built.values():
            stop(handle.lab)
        self.built.clear()


@pytest.fixture(scope="session")
def shared_labs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedLabs]:
    labs = SharedLabs(tmp_path_factory.mktemp("shared"))
    try:
        yield labs
    finally:
        labs.close()


@pytest.fixture
def shared_lab(shared_labs: SharedLabs, tmp_path: Path) -> Iterator[LabHandle]:
    """A running lab, nothing deployed, shared with other tests that leave it as found."""
    yield from shared_labs.lend("running", lambda handle: handle, tmp_path)


@pytest.fixture
def deployed_lab(shared_labs: SharedLabs, tmp_path: Path) -> Iterator[LabHandle]:
    """A lab with qwen-dflash deployed everywhere, shared with tests that leave it as found."""
    yield from shared_labs.lend("deployed", deploy_everywhere, tmp_path)


@pytest.fixture
def processes() -> Iterator[Processes]:
    """The processes a test starts (tests of the server's scripts), killed at its end."""
    tracked = Processes()
    try:
        yield tracked
    finally:
        tracked.cleanup()


@pytest.fixture
def deployment(tmp_path: Path) -> Path:
    """A deployment dir whose path a shell would misread unquoted (tests of the scripts)."""
    directory = tmp_path / "deploy it's $(x)"
    directory.mkdir()
    return directory


@pytest.fixture
def rendered() -> dict[str, bytes]:
    """The example release's rendered files, as release.verify expects them back (tests of
    cat-verify and of the diffs a deploy shows)."""
    return dict(release_files())
