"""An answer's tool calls as data (app.core.tool_steps): replayed to the model as they happened, stored by the
store's migration, and a chat's choice of servers and always-allowed tools kept with it. No Qt, no model."""

from app.core.chat_settings import ChatSettings
from app.core.export import answer_markdown
from app.core.store import Role, Store
from app.core.tool_steps import ToolStatus, ToolUse, replay, tool_key


def uses() -> list[ToolUse]:
    return [
        ToolUse("call_1", "read_file", {"path": "a.txt"}, "files", step=0, at=9, status="done", result="hi"),
        ToolUse("call_2", "search", {"pattern": "x"}, "files", step=1, at=9, status="tool_error", result="bad"),
    ]


def test_an_answer_is_replayed_pass_by_pass():
    chat = replay("Reading. It says hi.", uses())
    assert [(m.role, m.content) for m in chat] == [
        ("assistant", "Reading."),
        ("tool", "hi"),
        ("assistant", ""),
        ("tool", "bad"),  # a tool's own error goes back to the model as its result
        ("assistant", "It says hi."),
    ]
    assert chat[0].tool_calls[0].name == "read_file" and chat[1].tool_call_id == "call_1"
    assert chat[3].name == "search"


def test_an_export_shows_each_call_where_the_model_made_it():
    lines = answer_markdown("Reading. It says hi.", uses())
    text = "\n".join(lines)
    order = [text.index(part) for part in ("Reading.", "Tool call: read_file", "Tool call: search", "It says hi.")]
    assert order == sorted(order)
    assert answer_markdown("Just words.", []) == ["Just words.", ""]


def test_a_call_that_never_ran_says_why():
    use = ToolUse("call_1", "edit_file", {}, "files", status=ToolStatus.DENIED, error="denied by you")
    chat = replay("", [use])
    assert chat[-1].role == "tool" and chat[-1].content == "(not run: denied by you)"


def test_tool_uses_are_stored_and_read_back(tmp_path):
    store = Store(tmp_path / "chats.db")
    conv = store.create_conversation("t")
    store.add_message(conv.id, Role.USER, "q")
    answer = store.add_message(conv.id, Role.ASSISTANT, "")
    store.set_tool_uses(answer.id, uses())
    store.close()
    again = Store(tmp_path / "chats.db")
    messages = again.messages(conv.id)
    assert messages[-1].tool_uses == uses()
    assert messages[-1].tool_uses[1].status == ToolStatus.FAILED_TOOL
    again.close()


def test_unreadable_tool_uses_are_left_out():
    assert ToolUse.from_dict({"name": "x", "status": "no such"}) is None
    assert ToolUse.from_dict("nothing") is None


def test_a_chat_keeps_its_servers_and_allowed_tools():
    chat = ChatSettings(mcp_servers=["files"], allowed_tools=[tool_key("files", "read_file")])
    again = ChatSettings.from_dict(chat.to_dict())
    assert again.mcp_servers == ["files"] and again.allowed_tools == ["files/read_file"]
    assert ChatSettings().to_dict() == {}  # none by default
    assert ChatSettings.from_dict({"mcp_servers": ["a", 3, "a", ""]}).mcp_servers == ["a"]
