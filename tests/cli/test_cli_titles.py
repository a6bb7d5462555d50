"""The CLI calls a session what the viewer calls it (issue 19, item 9):
``chathistory.titles.session_title``, its metadata title, else its first user message
with the Markdown stripped; the id stays its own column."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from clikit import Run

from chathistory import Message, open_store
from chathistory.stores.protocol import Store

if TYPE_CHECKING:
    from serverkit import Served  # tests/server (the keyed_server fixture puts it on the path)


def fill(store: Store, **tenant: str) -> dict[str, str]:
    """Sessions whose titles come from each place the rule looks; name -> id."""
    ids = {}
    ids["named"] = store.create_session(metadata={"title": "Quarterly  report"}, **tenant).id
    ids["subject"] = store.create_session(metadata={"subject": "Re: invoices"}, **tenant).id
    ids["markdown"] = store.create_session(metadata={"source_id": "a_0"}, **tenant).id
    store.append(ids["markdown"], [
        Message.system("You are terse."),
        Message.user("Compute **512 \\* 512** with [numpy](https://numpy.org)\n\n# now"),
        Message.assistant("262144")], **tenant)
    forked = store.fork(ids["markdown"], **tenant)
    store.append(forked.id, [Message.assistant("and 2 ** 18")], **tenant)
    ids["fork"] = forked.id
    ids["empty"] = store.create_session(**tenant).id
    return ids


EXPECTED = {"named": "Quarterly report", "subject": "Re: invoices",
            "markdown": "Compute 512 * 512 with numpy now",
            "fork": "Compute 512 * 512 with numpy now", "empty": None}


def test_sessions_and_show_use_the_viewers_title_rule(cli: Run, store_url: str) -> None:
    store = open_store(store_url)
    try:
        ids = fill(store)
    finally:
        store.close()
    listed = cli("sessions", "--json", "--store", store_url).json()["items"]
    assert {item["id"]: item["title"] for item in listed} == {
        ids[name]: title for name, title in EXPECTED.items()}
    table = cli("sessions", "--store", store_url).out.splitlines()
    for name, title in EXPECTED.items():
        row = next(line for line in table if line.startswith(ids[name]))  # the id column
        assert row.split("  ")[1].strip() == (title or "")
    assert not any("\\*" in line or "**" in line for line in table)

    shown = cli("show", ids["fork"], "--store", store_url)
    assert shown.out.startswith(f"session {ids['fork']} - Compute 512 * 512 with numpy now\n")
    assert cli("show", ids["markdown"], "--tail", "1", "--json", "--store", store_url
               ).json()["title"] == "Compute 512 * 512 with numpy now"  # not in the tail
    assert cli("show", ids["empty"], "--store", store_url).out.startswith(
        f"session {ids['empty']}\n")


def test_titles_through_an_http_store(cli: Run, keyed_server: Served,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    ids = fill(keyed_server.store, tenant="A")
    monkeypatch.setenv("CHATHISTORY_API_KEY", keyed_server.keys["A"])
    listed = cli("sessions", "--json", "--store", keyed_server.url).json()["items"]
    assert {item["id"]: item["title"] for item in listed} == {
        ids[name]: title for name, title in EXPECTED.items()}
    # the server's own listing agrees (one rule for the CLI and the viewer)
    with keyed_server.client("A") as client:
        api = client.get("/v1/sessions").json()["items"]
    assert {item["id"]: item["title"] for item in api} == {
        item["id"]: item["title"] for item in listed}


def test_two_branches_of_one_title_differ_by_their_branch_column(cli: Run,
                                                                  store_url: str) -> None:
    store = open_store(store_url)
    try:
        main = store.create_session(metadata={"title": "Numpy sums"}).id
        store.append(main, [Message.user("sum?"), Message.assistant("3")])
        alt = store.fork(main, store.range(main)[0].id).id
        store.update_session(alt, metadata={"title": "Numpy sums", "branch": "2 of 2"})
        store.append(alt, [Message.assistant("it is 3")])
    finally:
        store.close()
    table = cli("sessions", "--store", store_url).out.splitlines()
    main_row = next(line for line in table if line.startswith(main))
    alt_row = next(line for line in table if line.startswith(alt))
    assert "Numpy sums" in main_row and "Numpy sums" in alt_row
    assert "2 of 2 at #1" in alt_row and "2 of 2" not in main_row
