"""``jaxpo.core.checks``: an error keeps the field it is about, and each door names that
field in its own words from a table; the one positive-integer check."""

import pickle

import numpy as np
import pytest

from jaxpo.core.checks import FieldError, Ref, Setting, positive_int


def test_a_field_error_names_its_fields_as_each_door_calls_them():
    err = FieldError.saying("run.checkpoint_every", Ref("run.checkpoint_every"), "=2 asks for periodic checkpoints, "
                            "but ", Ref("run.checkpoint"), " is off; use ", Setting("run.on_nan", "mask", "on_nan"))
    assert isinstance(err, ValueError) and err.path == "run.checkpoint_every"
    assert str(err) == "run.checkpoint_every=2 asks for periodic checkpoints, but run.checkpoint is off; use on_nan='mask'"
    flags = {"run.checkpoint_every": "--checkpoint-every", "run.checkpoint": "--checkpoint", "run.on_nan": "--on-nan"}
    assert err.named(flags, flags=True) == ("--checkpoint-every=2 asks for periodic checkpoints, but --checkpoint is "
                                            "off; use --on-nan mask")
    renamed = err.renamed({"run.checkpoint_every": "checkpoint_every", "run.checkpoint": "checkpoint"})
    assert str(renamed).startswith("checkpoint_every=2 asks for periodic checkpoints, but checkpoint is off")
    assert renamed.path == err.path


def test_a_message_of_text_starts_with_the_fields_own_name():
    err = FieldError("config.num_envs", "must be a positive integer, got 0", shown="Config.num_envs")
    assert str(err) == "Config.num_envs must be a positive integer, got 0"
    assert err.named({"config.num_envs": "--num-envs"}) == "--num-envs must be a positive integer, got 0"
    again = pickle.loads(pickle.dumps(err))  # errors cross processes
    assert type(again) is FieldError and again.path == err.path and str(again) == str(err)


@pytest.mark.parametrize("value", [0, -3, True, np.bool_(True), 1.0, "2", None])
def test_positive_int_refuses_what_is_not_a_count(value):
    with pytest.raises(FieldError, match=r"^run.seeds must be a positive integer, got ") as info:
        positive_int(value, "run.seeds")
    assert info.value.path == "run.seeds"


def test_positive_int_returns_a_python_int():
    assert positive_int(np.int64(3), "n") == 3 and type(positive_int(np.int64(3), "n")) is int
