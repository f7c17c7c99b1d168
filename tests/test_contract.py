"""The job contract: marks written on the cluster are read back here, and a config from another
version is refused with a message that says so."""
from __future__ import annotations

import json

import pytest

from orchestrator import contract


def test_parse_result_takes_the_last_result_line():
    log = "\n".join(["noise", contract.result_line({"status": "FAILED"}),
                     "(TrainController pid=1) " + contract.result_line({"status": "SUCCEEDED"}),
                     contract.RESULT_MARK + "{not json"])
    assert contract.parse_result(log) == {"status": "SUCCEEDED"}
    assert contract.parse_result("nothing here") is None


def test_epoch_lines_round_trip_and_other_lines_are_not_epochs():
    row = {"epoch": 2, "loss": 0.5}
    assert contract.parse_epoch("(pid=3) " + contract.epoch_line(row)) == row
    assert contract.parse_epoch("epoch 2 loss 0.5") is None
    assert contract.parse_epoch(contract.EPOCH_MARK + "[1, 2]") is None  # not an object


@pytest.mark.parametrize("text, words", [
    (None, "is not set"),
    (json.dumps({"version": 99}), "unsupported config version 99"),
    (json.dumps([1]), "unsupported config version None"),
    (json.dumps({"version": contract.CONFIG_VERSION, "workload": "dance"}), "unknown workload"),
])
def test_decode_refuses_what_it_cannot_run(text, words):
    with pytest.raises(contract.ContractError, match=words):
        contract.decode(text)


def test_decode_accepts_its_own_version():
    config = contract.decode(json.dumps({"version": contract.CONFIG_VERSION, "workload": "train",
                                         "name": "x"}))
    assert config["name"] == "x"


def test_a_version_1_config_without_a_workload_is_training():
    assert contract.decode(json.dumps({"version": 1, "name": "x"}))["workload"] == "train"
