import pytest

from hpcqa.core import config
from hpcqa.errors import ConfigError, UsageError
from tests.conftest import CONFIGS, ROOT, SLURM_HERE


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_shipped_config_validates(path):
    from hpcqa.core import plan

    cfg = config.load(path)
    assert plan.build_plan(cfg, plan.HostProbe(schedulers=SLURM_HERE)).world_size >= 1


def test_configs_dir_is_not_empty():
    names = {p.name for p in CONFIGS}
    assert {"squad_spr.toml", "quickstart.toml"} <= names


def test_defaults_fill_missing_sections():
    cfg = config.from_dict({})
    assert (
        cfg.cluster.nodes == 1
        and cfg.train.learning_rate == 3e-5
        and cfg.train.ddp_backend == "auto"
    )


def test_unknown_key_suggests_near_miss():
    with pytest.raises(ConfigError) as e:
        config.from_dict({"train": {"learnig_rate": 1e-4}})
    assert e.value.key == "train.learnig_rate"
    assert "did you mean 'learning_rate'" in e.value.render()


def test_a_key_of_another_section_names_its_section():
    """The common slip: a [model] key written under [train] (or --set train.hidden_dropout). The error names the
    section it belongs to, not the 40 keys of the one it was put in."""
    with pytest.raises(ConfigError) as e:
        config.from_dict({"train": {"hidden_dropout": 0.0}})
    said = e.value.render()
    assert e.value.key == "train.hidden_dropout" and "is a key of [model]" in said, said
    assert (
        "fix: put it under [model]: model.hidden_dropout" in said and "learning_rate" not in said
    ), said
    # a near miss of its own section's key still reads as a typo of that key, and so does the start of one:
    # model.name is name_or_path, not job.name
    with pytest.raises(ConfigError) as e:
        config.from_dict({"job": {"nme": "x"}})
    assert "did you mean 'name'" in e.value.render()
    with pytest.raises(ConfigError) as e:
        config.from_dict({"model": {"name": "x"}})
    assert "fix: rename it to model.name_or_path" in e.value.render(), e.value.render()
    # part of a key of its own section: no other section is named (cluster.queue is not k8s.queue)
    with pytest.raises(ConfigError) as e:
        config.from_dict({"cluster": {"queue": "x"}})
    assert "[k8s]" not in e.value.render() and "partition" in e.value.render()


def test_unknown_section_suggests_near_miss():
    with pytest.raises(ConfigError) as e:
        config.from_dict({"clustr": {}})
    assert "did you mean 'cluster'" in e.value.render()


@pytest.mark.parametrize(
    "raw,key,words",
    [
        ({"cluster": {"nodes": 0}}, "cluster.nodes", "below the minimum"),
        ({"cluster": {"nodes": "2"}}, "cluster.nodes", "expected an integer"),
        ({"cluster": {"nodes": True}}, "cluster.nodes", "expected an integer"),
        ({"cluster": {"exclusive": "yes"}}, "cluster.exclusive", "true or false"),
        ({"train": {"learning_rate": "fast"}}, "train.learning_rate", "expected a number"),
        ({"train": {"ddp_backend": "mpi"}}, "train.ddp_backend", "not one of"),
        (
            {"cluster": {"executor": "slurn"}},
            "cluster.executor",
            'fix: set cluster.executor = "slurm" (one of',
        ),
        # shown as TOML writes it, and the value meant when it is clear
        (
            {"cluster": {"nodes": "2"}},
            "cluster.nodes",
            'got "2"\n  fix: set cluster.nodes = 2 (without quotes)',
        ),
        ({"cluster": {"nodes": 2.0}}, "cluster.nodes", "got 2.0\n  fix: set cluster.nodes = 2"),
        ({"cluster": {"nodes": 2.5}}, "cluster.nodes", "fix: set cluster.nodes to an integer"),
        ({"cluster": {"nodes": True}}, "cluster.nodes", "got true\n"),
        (
            {"train": {"learning_rate": "1e-4"}},
            "train.learning_rate",
            "set train.learning_rate = 1e-4 (without",
        ),
        (
            {"train": {"learning_rate": "nan"}},
            "train.learning_rate",
            "set train.learning_rate to a number",
        ),
        (
            {"train": {"do_eval": "false"}},
            "train.do_eval",
            "set train.do_eval = false (without quotes)",
        ),
        (
            {"launch": {"ranks_per_socket": "2"}},
            "launch.ranks_per_socket",
            "ranks_per_socket = 2 (without",
        ),
        (
            {"cluster": {"cores_per_socket": 4}, "launch": {"ccl_workers": 4}},
            "launch.ccl_workers",
            "no compute core",
        ),
        ({"train": {"max_seq_length": 128, "doc_stride": 128}}, "train.doc_stride", "smaller than"),
        ({"cluster": {"executor": "local", "nodes": 2}}, "cluster.nodes", "one node"),
        ({"cluster": {"partition": "a b"}}, "cluster.partition", "characters"),
        ({"job": {"name": "x'; rm -rf /"}}, "job.name", "not a safe name"),
        ({"cluster": {"sbatch_extra": ["-p x"]}}, "cluster.sbatch_extra[0]", "long sbatch option"),
        ({"launch": {"env": {"1BAD": "x"}}}, "launch.env.1BAD", "environment variable"),
        ({"job": {"output_dir": "~/runs"}}, "job.output_dir", "starts with ~, which only a shell"),
        ({"cluster": {"python": "~alice/v/bin/python"}}, "cluster.python", "starts with ~"),
        ({"model": {"name_or_path": "$WORK/m"}}, "model.name_or_path", "$VARIABLE"),
        ({"data": {"cache_dir": "/x/${USER}/c"}}, "data.cache_dir", "$VARIABLE"),
        ({"data": {"dataset": ""}}, "data.dataset", "no data"),
        (
            {"data": {"dataset": "", "train_file": "t.json"}, "train": {"eval_strategy": "steps"}},
            "train.eval_strategy",
            "no validation data",
        ),
        (
            {"train": {"load_best_model_at_end": True}},
            "train.load_best_model_at_end",
            'eval_strategy is "no"',
        ),
        (
            {
                "train": {
                    "load_best_model_at_end": True,
                    "eval_strategy": "steps",
                    "eval_steps": 30,
                    "save_steps": 100,
                }
            },
            "train.save_steps",
            "not a multiple",
        ),
        (
            {"data": {"dataset": "", "train_file": "t.json"}, "train": {"do_predict": True}},
            "train.do_predict",
            "no test data",
        ),
        ({"train": {"eval_strategy": "sometimes"}}, "train.eval_strategy", "not one of"),
        ({"train": {"metric_for_best_model": "loss"}}, "train.metric_for_best_model", "not one of"),
        ({"data": {"dataset_config_name": "x; y"}}, "data.dataset_config_name", "characters"),
    ],
)
def test_bad_values_name_the_key(raw, key, words):
    with pytest.raises(ConfigError) as e:
        config.from_dict(raw, source="x.toml")
    assert e.value.key == key
    assert words in e.value.render()
    assert "fix:" in e.value.render()
    assert e.value.exit_code == 2


def test_int_is_accepted_for_float():
    assert config.from_dict({"train": {"num_train_epochs": 3}}).train.num_train_epochs == 3.0


@pytest.mark.parametrize(
    "text,key,value",
    [
        ("train.learning_rate=5e-5", "train.learning_rate", 5e-5),
        ("cluster.nodes=4", "cluster.nodes", 4),
        ("cluster.exclusive=false", "cluster.exclusive", False),
        ("train.ddp_backend=ccl", "train.ddp_backend", "ccl"),
        ('job.name="a=b"', "job.name", "a=b"),
        ("cluster.sbatch_extra=['--reservation=x']", "cluster.sbatch_extra", ["--reservation=x"]),
        ("model.name_or_path=/models/bert base", "model.name_or_path", "/models/bert base"),
    ],
)
def test_override_values_are_toml_else_string(text, key, value):
    assert config.parse_override(text) == (key, value)


def test_override_applies_and_is_validated(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text("[cluster]\nnodes = 2\n")
    cfg = config.load(p, ["cluster.nodes=3", "train.learning_rate=1e-4", "launch.env.FOO=bar"])
    assert (
        cfg.cluster.nodes == 3
        and cfg.train.learning_rate == 1e-4
        and cfg.launch.env == {"FOO": "bar"}
    )
    with pytest.raises(ConfigError) as e:
        config.load(p, ["cluster.nodes=0"])
    assert e.value.source.startswith("--set") and e.value.key == "cluster.nodes"


@pytest.mark.parametrize("bad", ["nodes", "=3", "nodes=3", "cluster.=3"])
def test_malformed_override_is_usage_error(bad):
    with pytest.raises(UsageError):
        config.parse_override(bad)


def test_toml_syntax_error_names_line(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text("[cluster]\nnodes = 2\npartition = spr\n")
    with pytest.raises(ConfigError) as e:
        config.load(p)
    assert "line 3" in e.value.render() and str(p) in e.value.render()


def test_missing_file():
    with pytest.raises(UsageError) as e:
        config.load("/nonexistent/x.toml")
    assert "not found" in e.value.render()


def test_snapshot_round_trips():
    cfg = config.load(ROOT / "configs" / "squad_spr.toml", ['launch.env.X="a b \\"q\\" $(x) ;'])
    again = config.from_dict(config.tomllib.loads(config.to_toml(cfg)))
    assert again.to_dict() == cfg.to_dict()


def test_reference_covers_every_key_and_readme_lists_them():
    rows = config.reference_rows()
    keys = {r[0] for r in rows}
    for fixed in (
        "cluster.nodes",
        "cluster.sockets_per_node",
        "cluster.cores_per_socket",
        "cluster.threads_per_core",
        "launch.ccl_workers",
        "train.ddp_backend",
    ):
        assert fixed in keys
    reference = (ROOT / "docs" / "configuration.md").read_text()
    missing = [k for k in keys if f"`{k}`" not in reference]
    assert not missing, f"docs/configuration.md lacks {missing}: run python -m hpcqa.docs"
    # and the [sweep] settings (by hand, after the generated part): every one the sweep reader takes
    from hpcqa.core import sweep

    absent = [k for k in sorted(sweep.RESERVED) if f"`sweep.{k}`" not in reference]
    assert not absent, f"docs/configuration.md's [sweep] table lacks {absent}"


def test_kubernetes_names_are_held_to_what_the_api_server_takes():
    """A namespace, PVC, service account, priority class, Kueue queue or runtime name past Kubernetes' length for it
    is refused naming its own key (not job.name, and not by the API server after the render said exit 0); a name
    at the limit passes."""
    from hpcqa.core import configcheck

    quick = ROOT / "configs" / "quickstart.toml"
    for key, most in configcheck.K8S_NAME_MAX.items():
        config.load(quick, [f'k8s.{key}="{"a" * most}"'])
        with pytest.raises(ConfigError) as e:
            config.load(quick, [f'k8s.{key}="{"a" * (most + 1)}"'])
        assert e.value.key == f"k8s.{key}" and f"at most {most}" in e.value.message


def test_launch_env_is_held_to_what_the_kernel_execs():
    """A launch.env variable over MAX_ARG_STRLEN (its "NAME=value" with the NUL: 131072 bytes) made every rank exit
    127 with an empty log; refused naming its key, its size and the limit. One at the limit passes; several that
    each pass but add up past the budget are refused naming the largest."""
    from hpcqa.core import configcheck

    quick = ROOT / "configs" / "quickstart.toml"
    at_limit = "a" * (configcheck.MAX_ENV_ENTRY - len("BIG=") - 1)
    assert config.load(quick, [f'launch.env.BIG="{at_limit}"']).launch.env["BIG"] == at_limit
    with pytest.raises(ConfigError) as e:
        config.load(quick, [f'launch.env.BIG="{at_limit}é"'])  # one character, two bytes over
    assert e.value.key == "launch.env.BIG" and "131,074 bytes" in e.value.message
    assert "131,072" in e.value.message and "file" in e.value.hint
    third = "b" * (configcheck.MAX_ENV_ENTRY // 3)
    # five thirds of one variable's limit: under the budget
    fine = [f'launch.env.A{i}="{third}"' for i in range(5)]
    assert len(config.load(quick, fine).launch.env) == 5
    with pytest.raises(ConfigError) as e:
        config.load(
            quick, [*fine, f'launch.env.LARGEST="{third}c"', f'launch.env.SMALL="{third[:-5]}"']
        )
    assert e.value.key == "launch.env.LARGEST" and "262,144" in e.value.message


def test_the_fused_attention_under_torch_compile_is_refused_naming_the_key():
    """Inductor cannot trace the fused kernel: asked for together, the config is refused before anything runs
    (auto picks hpcqa's attention under train.compile instead)."""
    with pytest.raises(ConfigError) as e:
        config.from_dict({"model": {"attention": "fused"}, "train": {"compile": True}})
    assert e.value.key == "model.attention" and "train.compile" in e.value.render()
    config.from_dict({"model": {"attention": "auto"}, "train": {"compile": True}})
    config.from_dict({"model": {"attention": "fused"}})


def test_a_path_a_shell_would_expand_is_refused_with_the_path_it_means_here(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", "/home/alice")
    monkeypatch.setenv("SCRATCH", "/scratch/alice")
    for value, meant in (("~/runs", "/home/alice/runs"), ("$SCRATCH/runs", "/scratch/alice/runs")):
        with pytest.raises(ConfigError) as e:
            config.from_dict({"job": {"output_dir": value}})
        assert f'job.output_dir = "{meant}"' in e.value.hint
    # a ~ or $ that no shell would expand is a name like any other
    for fine in ("/data/run~1", "runs/~old", "/data/cost$", "/data/a$1"):
        assert config.from_dict({"job": {"output_dir": fine}}).job.output_dir == fine
    # a file whose name holds a $ and no such variable is set: that file; with the variable set, refused
    literal = tmp_path / "a$b"
    literal.mkdir()
    monkeypatch.delenv("b", raising=False)
    assert config.from_dict({"job": {"output_dir": str(literal)}}).job.output_dir == str(literal)
    monkeypatch.setenv("b", "x")
    with pytest.raises(ConfigError):
        config.from_dict({"job": {"output_dir": str(literal)}})
