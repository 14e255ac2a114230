"""Fleet-wide runs on the lab: one run id names every container's release, `orch
releases` lists them, `rollback --to` a run restores them, and verify-config tells a
hand edit from a playbook that changed since the run applied it."""

from __future__ import annotations

import json

import pytest
from labtools import FAST, LabHandle

from orchestrator.contract import Document

pytestmark = pytest.mark.lab

NAMES = ("ct200", "ct201")


def orch(lab: LabHandle, command: str, *args: str) -> tuple[int, dict]:
    result = lab.orch(command, "qwen-dflash", "-i", str(lab.inventory), "--json", *args)
    assert result.stdout, result.stderr
    return result.code, result.json


def by_name(document: dict) -> dict[str, dict]:
    return {t["name"]: t for t in document["targets"]}


def current(lab: LabHandle, name: str) -> str:
    return (lab.deployment_dir(name) / "current").readlink().name


def audit(lab: LabHandle, name: str) -> list[dict]:
    lines = (lab.deployment_dir(name) / "audit.log").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_runs_name_the_fleet_and_rollback_to_a_run_restores_it(lab: LabHandle) -> None:
    code, first = orch(lab, "deploy", *FAST)
    assert code == 0, first
    first_releases = {name: t["release"] for name, t in by_name(first).items()}
    code, second = orch(lab, "deploy", *FAST, "--set", "server.max_model_len=8192")
    assert code == 0, second
    second_releases = {name: t["release"] for name, t in by_name(second).items()}
    assert set(first_releases.values()).isdisjoint(second_releases.values())

    # The manifest records what was applied; without the --set the playbook now
    # differs (information, exit 0), and nothing was changed on the target.
    manifest = json.loads(
        (
            lab.deployment_dir("ct200") / "releases" / second_releases["ct200"] / "manifest.json"
        ).read_text()
    )
    assert manifest["run_id"] == second["run_id"]
    assert manifest["assignments"][-1] == "server.max_model_len=8192"
    assert manifest["playbook_path"].endswith("qwen-dflash.yaml")
    assert len(manifest["playbook_sha256"]) == 64
    code, verified = orch(lab, "verify-config")
    assert code == 0 and Document.model_validate(verified).kind == "Verify", verified
    for entry in verified["targets"]:
        assert entry["result"] == "ok" and entry["changed_on_target"] == []
        [differs] = entry["playbook_differs"]
        assert differs.startswith(
            f"serve.sh: the playbook now differs from what run {second['run_id']}"
        )
        assert "-  --max-model-len 8192 \\" in differs and "+  --max-model-len 32768 \\" in differs
        assert entry["apply_with"].startswith("orch deploy qwen-dflash -i ")
        # the server check the second deploy kept is reused, not asked again
        assert entry["server_check_reused"].endswith(f"(run {second['run_id']})")
    code, same = orch(lab, "verify-config", "--set", "server.max_model_len=8192", "--recheck")
    assert code == 0 and all(t["playbook_differs"] == [] for t in same["targets"])
    assert all("server_check_reused" not in t for t in same["targets"])

    # Every container names the second run, whose releases are current.
    code, listed = orch(lab, "releases")
    assert code == 0 and Document.model_validate(listed).kind == "Releases"
    runs = [run["run_id"] for run in listed["runs"]]
    assert runs == [second["run_id"], first["run_id"]]
    newest = {t["name"]: (t["release"], t["release_state"]) for t in listed["runs"][0]["targets"]}
    assert newest == {name: (second_releases[name], "current") for name in NAMES}
    older = {t["name"]: (t["release"], t["release_state"]) for t in listed["runs"][1]["targets"]}
    assert older == {name: (first_releases[name], "kept") for name in NAMES}
    table = lab.orch("releases", "qwen-dflash", "-i", str(lab.inventory))
    assert table.code == 0 and second["run_id"] in table.stdout

    # An ambiguous or unknown id is refused before anything is switched.
    both = first["run_id"][:4]  # both runs began in the same year
    for query, words in (
        (both, f"ambiguous, it begins 2 ids: run {second['run_id']}, run {first['run_id']}"),
        ("zzz", "no run or release has this id"),
    ):
        refused = lab.orch("rollback", "qwen-dflash", "-i", str(lab.inventory), "--to", query)
        assert refused.code == 2, refused.stderr
        assert words in refused.stderr
    assert {name: current(lab, name) for name in NAMES} == second_releases
    assert all(audit(lab, name)[-1]["run_id"] == second["run_id"] for name in NAMES)

    # A unique prefix of the first run's id puts every container back on its release.
    prefix = first["run_id"][: len(first["run_id"]) - 2]
    code, back = orch(lab, "rollback", *FAST, "--to", prefix)
    assert code == 0, back
    assert back["to"] == {"query": prefix, "run_id": first["run_id"], "release": None}
    for name, entry in by_name(back).items():
        assert (entry["result"], entry["release"]) == ("rolled_back", first_releases[name])
        assert current(lab, name) == first_releases[name]

    # A deploy that changes nothing still names each container's state in its run,
    # and a rollback to a run that touched one container skips the other.
    code, unchanged = orch(lab, "deploy", *FAST, "--limit", "ct201")
    assert code == 0 and by_name(unchanged)["ct201"]["result"] == "unchanged"
    line = audit(lab, "ct201")[-1]
    assert (line["run_id"], line["result"], line["current"]) == (
        unchanged["run_id"],
        "unchanged",
        first_releases["ct201"],
    )
    release_prefix = first_releases["ct201"][:8]  # a container's release id stands for its run
    code, again = orch(lab, "rollback", *FAST, "--to", unchanged["run_id"])
    assert code == 0, again
    entries = by_name(again)
    assert entries["ct201"]["result"] == "unchanged"
    assert entries["ct200"]["result"] == "skipped"
    assert entries["ct200"]["notes"] == [f"run {unchanged['run_id']} did not touch ct200"]
    via_release = lab.orch(
        "rollback", "qwen-dflash", "-i", str(lab.inventory), *FAST, "--to", release_prefix
    )
    assert via_release.code == 0, str(via_release)
    assert f"--to {release_prefix}: back to the state run {first['run_id']} left" in (
        via_release.stdout
    )
    assert via_release.stdout.count("unchanged") == 2

    # A hand edit is a change on the target since the run that applied the release.
    config = lab.deployment_dir("ct200") / "current" / "config.json"
    edited = json.loads(config.read_text())
    edited["dflash_config"]["mask_token_id"] = 248064
    config.write_text(json.dumps(edited, indent=2))
    code, drifted = orch(lab, "verify-config", "--limit", "ct200")
    assert code == 1
    [entry] = drifted["targets"]
    assert entry["result"] == "drift" and entry["playbook_differs"] == []
    assert entry["changed_on_target"][0].startswith(
        f"changed on the target since run {first['run_id']}: config.json: SHA-256 "
    )
    assert any("dflash_config" in change for change in entry["changed_on_target"])
    assert any(f["field"] == "dflash_config.mask_token_id" for f in entry["findings"])
    text = lab.orch("verify-config", "qwen-dflash", "-i", str(lab.inventory), "--limit", "ct200")
    assert text.code == 1 and "changed on the target since run" in text.stdout
    assert text.stdout.splitlines()[-1] == (
        f"ct200: drift: its release was changed on the container since run {first['run_id']} "
        "applied it; its files fail 2 drafter check(s)"
    )
