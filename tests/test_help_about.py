"""Help → About says which Specula this is and where its data lives."""
# ruff: noqa: F811  (pytest fixtures imported from tests.app_helpers)

from app.ui.about import about_html
from tests.app_helpers import make_window  # noqa: F401 (a fixture)


def test_help_about_names_the_version_and_where_the_data_lives(qtbot, make_window, isolated_home):
    from importlib.metadata import version

    window = make_window(wait=False)
    text = about_html(window.store)
    assert f"Specula {version('specula')}" in text and str(isolated_home) in text
    assert f"llama-cpp-python {version('llama_cpp_python')}" in text and "chats" in text
