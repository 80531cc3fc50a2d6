"""``toolgym serve --engine vllm``: what it runs, and its errors when vLLM is not there (no vLLM needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from toolgym.cli import app
from toolgym.core.errors import ConfigError
from toolgym.core.llm.local.tiny import template_source
from toolgym.core.llm.serving.server_vllm import VLLMServer, vllm_python


def test_not_installed_is_one_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TOOLGYM_VLLM_PYTHON", str(tmp_path / "nope" / "python"))
    with pytest.raises(ConfigError, match=r"does not exist; install it with `bash scripts/ensure-vllm.sh`"):
        vllm_python()
    result = CliRunner().invoke(app, ["serve", "--engine", "vllm", "tiny"])
    assert isinstance(result.exception, ConfigError) and "ensure-vllm.sh" in str(result.exception)
    assert "\n" not in str(result.exception)


def test_the_checkouts_vllm_venv_is_found_from_another_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    checkout = Path(__file__).resolve().parents[3]
    assert (checkout / "pyproject.toml").is_file()
    monkeypatch.delenv("TOOLGYM_VLLM_PYTHON", raising=False)
    monkeypatch.chdir(tmp_path)
    try:
        found = vllm_python()
    except ConfigError as exc:  # no .venv-vllm in this checkout: the message names where it looked
        assert f"or {checkout})" in str(exc)
    else:
        assert found == checkout / ".venv-vllm" / "bin" / "python"


def test_unknown_engine_and_non_local_models_are_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    result = CliRunner().invoke(app, ["serve", "--engine", "tgi", "tiny"])
    assert "unknown --engine 'tgi'; use one of toolgym, vllm" in str(result.exception)
    result = CliRunner().invoke(app, ["serve", "--engine", "vllm", "Qwen/Qwen2.5-7B-Instruct"])
    assert "local Hugging Face model directory" in str(result.exception)


def test_the_command_asks_for_scaled_logprobs_on_a_free_port(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from toolgym.core.llm.serving.server_vllm import vllm_tiny_model

    fake = tmp_path / "python"
    fake.write_text("")
    monkeypatch.setenv("TOOLGYM_VLLM_PYTHON", str(fake))
    a, b = VLLMServer(vllm_tiny_model(), max_model_len=1024), VLLMServer(vllm_tiny_model(), max_model_len=512)
    cmd = a.command()
    assert cmd[:3] == [str(fake), "-m", "vllm.entrypoints.openai.api_server"]
    assert cmd[cmd.index("--logprobs-mode") + 1] == "processed_logprobs"
    assert cmd[cmd.index("--max-model-len") + 1] == "1024" and cmd[cmd.index("--dtype") + 1] == "float32"
    assert a.port != b.port and a.log_path != b.log_path
    assert a.environment()["HF_HUB_OFFLINE"] == "1"
    with pytest.raises(ConfigError, match=r"has no config\.json"):
        VLLMServer(tmp_path)


def test_every_tiny_family_is_served_as_its_vllm_build() -> None:
    """``toolgym serve --engine vllm tiny-<family>``: the family's own tokenizer and template, in a
    model vLLM's CPU attention takes (head size 32); local directories pass through; others are None."""
    from toolgym.core.llm.resolve import TINY
    from toolgym.core.llm.serving.server_vllm import vllm_model_dir, vllm_tiny_model

    for name, family in TINY.items():
        directory = vllm_model_dir(name)
        assert directory == vllm_tiny_model(family), name
        config = json.loads((directory / "config.json").read_text())
        config = config.get("text_config", config)  # a VLM's (tiny-vl) text model is nested
        assert config["hidden_size"] // config["num_attention_heads"] == 32
        assert (directory / "chat_template.jinja").read_text() == template_source(family)
    assert vllm_model_dir(str(vllm_tiny_model("glm-4.5"))) == vllm_tiny_model("glm-4.5")
    assert vllm_model_dir("tiny-nonesuch") is None


def test_quick_start_runs_eager_without_a_worker_process(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from toolgym.core.llm.serving.server_vllm import vllm_tiny_model

    fake = tmp_path / "python"
    fake.write_text("")
    monkeypatch.setenv("TOOLGYM_VLLM_PYTHON", str(fake))
    plain, quick = VLLMServer(vllm_tiny_model()), VLLMServer(vllm_tiny_model(), quick_start=True)
    assert (
        "--enforce-eager" not in plain.command()
        and "VLLM_ENABLE_V1_MULTIPROCESSING" not in plain.environment()
    )
    cmd = quick.command()
    assert "--enforce-eager" in cmd and cmd[cmd.index("--distributed-executor-backend") + 1] == "uni"
    assert (
        quick.environment()["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    )  # else vLLM's CPU platform turns uni back into mp


def test_a_vision_language_model_gets_its_own_vllm_and_the_generate_endpoint(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``tiny-vl`` is served from ``.venv-vllm-vl`` (``TOOLGYM_VLLM_VL_PYTHON``) with
    ``--enable-scale-out`` (``/inference/v1/generate``: ids and images in); text models are not."""
    from toolgym.core.llm.serving.server_vllm import vllm_tiny_model

    text_python, vl_python = tmp_path / "python", tmp_path / "python-vl"
    text_python.write_text("")
    vl_python.write_text("")
    monkeypatch.setenv("TOOLGYM_VLLM_PYTHON", str(text_python))
    monkeypatch.setenv("TOOLGYM_VLLM_VL_PYTHON", str(vl_python))
    text, vl = VLLMServer(vllm_tiny_model()), VLLMServer(vllm_tiny_model("qwen2.5-vl"), max_model_len=4096)
    assert text.command()[0] == str(text_python) and "--enable-scale-out" not in text.command()
    assert vl.command()[0] == str(vl_python) and "--enable-scale-out" in vl.command()
    monkeypatch.setenv("TOOLGYM_VLLM_VL_PYTHON", str(tmp_path / "nope"))
    with pytest.raises(
        ConfigError, match=r"TOOLGYM_VLLM_VL_PYTHON .* `bash scripts/ensure-vllm.sh --vision`"
    ):
        vllm_python(vision=True)
