"""Importing an adapter without its framework names the extra to install."""

from __future__ import annotations

import importlib
import sys

import pytest

from chathistory import MissingDependency

CASES = [
    ("langchain", "langchain_core", "langchain-core", "langchain"),
    ("openai_agents", "agents", "openai-agents", "openai-agents"),
    ("agent_framework", "agent_framework", "agent-framework-core", "agent-framework"),
    ("pydantic_ai", "pydantic_ai", "pydantic-ai-slim", "pydantic-ai"),
]


@pytest.mark.parametrize(("module", "framework", "package", "extra"), CASES)
def test_missing_framework_raises_missing_dependency(
        monkeypatch: pytest.MonkeyPatch, module: str, framework: str, package: str,
        extra: str) -> None:
    name = f"chathistory.integrations.{module}"
    for loaded in [m for m in sys.modules if m == framework or m.startswith(framework + ".")]:
        monkeypatch.delitem(sys.modules, loaded)
    monkeypatch.setitem(sys.modules, framework, None)  # "import framework" now fails
    monkeypatch.delitem(sys.modules, name, raising=False)
    with pytest.raises(MissingDependency) as caught:
        importlib.import_module(name)
    assert isinstance(caught.value, ImportError)
    assert caught.value.package == package
    assert caught.value.extra == extra
    assert f"pip install 'chathistory[{extra}]'" in str(caught.value)
    monkeypatch.delitem(sys.modules, name, raising=False)


def test_the_package_imports_no_framework() -> None:
    import chathistory.integrations as integrations

    assert integrations.__all__ == []
    from pathlib import Path

    source = Path(integrations.__file__).read_text(encoding="utf-8")
    assert "import langchain" not in source and "import agents" not in source


@pytest.mark.parametrize(("module", "framework", "package", "extra"), CASES)
def test_every_extra_is_declared(module: str, framework: str, package: str,
                                 extra: str) -> None:
    import tomllib
    from pathlib import Path

    pyproject = Path(__file__).parents[2] / "pyproject.toml"
    extras = tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]
    assert any(dep.startswith(package + ">=") for dep in extras[extra])
    assert any(extra in dep for dep in extras["dev"] if dep.startswith("chathistory["))
