"""The fake API's patch semantics, checked against the RFCs' own examples (D1, D3).

The agent's D1 and D3 tests are only as good as the fake's PATCH: these cases come from
RFC 7386 Appendix A and RFC 6902 Appendix A, not from the implementation.
"""

from __future__ import annotations

import pytest

from gpu_agent.kube import Conflict, Unprocessable
from tests.support.fake_kube import FakeKube, json_patch, merge_patch


@pytest.mark.parametrize(
    ("target", "patch", "result"),
    [  # RFC 7386 Appendix A
        ({"a": "b"}, {"a": "c"}, {"a": "c"}),
        ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
        ({"a": "b"}, {"a": None}, {}),
        ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
        ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
        ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
        ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
        ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
        (["a", "b"], ["c", "d"], ["c", "d"]),
        ({"a": "b"}, ["c"], ["c"]),
        ({"a": "foo"}, None, None),
        ({"a": "foo"}, "bar", "bar"),
        ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
        ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
        ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
    ],
)
def test_merge_patch_is_rfc7386(target, patch, result):
    assert merge_patch(target, patch) == result


@pytest.mark.parametrize(
    ("doc", "ops", "result"),
    [  # RFC 6902 Appendix A (A.1-A.7, A.10, A.14, A.16)
        (
            {"foo": "bar"},
            [{"op": "add", "path": "/baz", "value": "qux"}],
            {"baz": "qux", "foo": "bar"},
        ),
        (
            {"foo": ["bar", "baz"]},
            [{"op": "add", "path": "/foo/1", "value": "qux"}],
            {"foo": ["bar", "qux", "baz"]},
        ),
        ({"baz": "qux", "foo": "bar"}, [{"op": "remove", "path": "/baz"}], {"foo": "bar"}),
        (
            {"foo": ["bar", "qux", "baz"]},
            [{"op": "remove", "path": "/foo/1"}],
            {"foo": ["bar", "baz"]},
        ),
        (
            {"baz": "qux", "foo": "bar"},
            [{"op": "replace", "path": "/baz", "value": "boo"}],
            {"baz": "boo", "foo": "bar"},
        ),
        (
            {"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}},
            [{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}],
            {"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}},
        ),
        (
            {"baz": "qux", "foo": ["a", 2, "c"]},
            [
                {"op": "test", "path": "/baz", "value": "qux"},
                {"op": "test", "path": "/foo/1", "value": 2},
            ],
            {"baz": "qux", "foo": ["a", 2, "c"]},
        ),
        (
            {"foo": "bar"},
            [{"op": "add", "path": "/child", "value": {"grandchild": {}}}],
            {"foo": "bar", "child": {"grandchild": {}}},
        ),
        (
            {"/": 9, "~1": 10},
            [{"op": "test", "path": "/~01", "value": 10}],
            {"/": 9, "~1": 10},
        ),
        (
            {"foo": ["bar"]},
            [{"op": "add", "path": "/foo/-", "value": ["abc"]}],
            {"foo": ["bar", ["abc"]]},
        ),
        # 4.1: add on an existing member replaces it (what erased the kubelet's capacity)
        (
            {"status": {"capacity": {"cpu": "4"}}},
            [{"op": "add", "path": "/status/capacity", "value": {}}],
            {"status": {"capacity": {}}},
        ),
    ],
)
def test_json_patch_is_rfc6902(doc, ops, result):
    assert json_patch(doc, ops) == result


@pytest.mark.parametrize(
    ("doc", "ops"),
    [  # RFC 6902 A.8, A.9, A.12, A.15; a missing member fails `test` and `replace`
        ({"baz": "qux"}, [{"op": "test", "path": "/baz", "value": "bar"}]),
        ({"foo": "bar"}, [{"op": "add", "path": "/baz/bat", "value": "qux"}]),
        ({"/": 9, "~1": 10}, [{"op": "test", "path": "/~01", "value": "10"}]),
        ({"foo": ["bar", "baz"]}, [{"op": "add", "path": "/foo/3", "value": "q"}]),
        ({"a": 1}, [{"op": "test", "path": "/b", "value": None}]),
        ({"a": True}, [{"op": "test", "path": "/a", "value": 1}]),
        ({"a": 1}, [{"op": "replace", "path": "/b", "value": 2}]),
    ],
)
def test_failed_json_patch_is_422_and_applies_nothing(doc, ops):
    before = repr(doc)
    with pytest.raises(Unprocessable) as info:
        json_patch(doc, [{"op": "add", "path": "/first", "value": 1}, *ops])
    assert info.value.status == 422
    assert repr(doc) == before


def test_fake_pod_patch_takes_both_patch_types_like_the_server():
    kube = FakeKube()
    kube.add_pod("a", "p")
    rv = kube.pods[("a", "p")]["metadata"]["resourceVersion"]
    kube.set_pod_phase("a", "p", "Running")  # the kubelet: a new resourceVersion
    with pytest.raises(Conflict):  # merge patch: metadata.resourceVersion is a precondition
        kube.patch_pod("a", "p", {"metadata": {"resourceVersion": rv, "annotations": {"k": "v"}}})
    # JSON Patch: applied to the latest object, its test ops are the only preconditions
    kube.patch_pod("a", "p", [{"op": "add", "path": "/metadata/annotations/x~1y", "value": "1"}])
    assert kube.pod_annotations("a", "p") == {"x/y": "1"}
    stale = [{"op": "test", "path": "/metadata/annotations/x~1y", "value": "2"}]
    with pytest.raises(Unprocessable, match="testing value"):
        kube.patch_pod("a", "p", stale)
