"""The chart's pre-delete hook (`python -m raytrain_operator.uninstall`) against a fake of the
CustomObjectsApi calls it makes: list, patch, delete TrainJobs."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from _clock import FakeClock
from kubernetes.client.exceptions import ApiException

from raytrain_operator import uninstall
from raytrain_operator.uninstall import Options, Uninstaller

OURS = "kopf.raytrain.dev/finalizer"
OLD = "raytrain.dev/finalizer"
OTHER = "example.com/other"


class FakeApi:
    """TrainJobs by (namespace, name); patches honour resourceVersion like the API server."""

    def __init__(self, *objects: dict[str, Any]) -> None:
        self.objects = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in objects}
        self.patches: list[tuple[str, str, dict[str, Any]]] = []
        self.deleted: list[tuple[str, str]] = []
        self.conflicts = 0  # answer this many patches with 409, as if the object changed
        self.crd_gone = False
        self.operator_releases = True  # a running operator lets deleted TrainJobs go

    def _items(self, namespace: str | None) -> dict[str, Any]:
        if self.crd_gone:
            raise ApiException(status=404, reason="Not Found")
        return {
            "items": [
                copy.deepcopy(o)
                for (ns, _), o in sorted(self.objects.items())
                if namespace in (None, ns)
            ]
        }

    def list_cluster_custom_object(self, group: str, version: str, plural: str) -> Any:
        assert (group, version, plural) == ("raytrain.dev", "v1alpha1", "trainjobs")
        return self._items(None)

    def list_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str
    ) -> Any:
        assert (group, version, plural) == ("raytrain.dev", "v1alpha1", "trainjobs")
        return self._items(namespace)

    def patch_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, name: str, body: Any
    ) -> Any:
        self.patches.append((namespace, name, body))
        obj = self.objects.get((namespace, name))
        if obj is None:
            raise ApiException(status=404, reason="Not Found")
        if (
            self.conflicts
            or body["metadata"]["resourceVersion"] != obj["metadata"]["resourceVersion"]
        ):
            self.conflicts = max(self.conflicts - 1, 0)
            raise ApiException(status=409, reason="Conflict")
        obj["metadata"]["finalizers"] = body["metadata"]["finalizers"]
        obj["metadata"]["resourceVersion"] = str(int(obj["metadata"]["resourceVersion"]) + 1)
        self._maybe_gone(namespace, name)
        return obj

    def delete_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, name: str
    ) -> Any:
        obj = self.objects.get((namespace, name))
        if obj is None:
            raise ApiException(status=404, reason="Not Found")
        self.deleted.append((namespace, name))
        obj["metadata"]["deletionTimestamp"] = "2026-11-23T12:00:00Z"
        if self.operator_releases:
            obj["metadata"]["finalizers"] = [f for f in obj["metadata"]["finalizers"] if f != OURS]
        self._maybe_gone(namespace, name)
        return {}

    def _maybe_gone(self, namespace: str, name: str) -> None:
        meta = self.objects[(namespace, name)]["metadata"]
        if meta.get("deletionTimestamp") and not meta["finalizers"]:
            del self.objects[(namespace, name)]


def trainjob(namespace: str, name: str, *finalizers: str) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": namespace,
            "name": name,
            "finalizers": list(finalizers),
            "resourceVersion": "1",
        }
    }


def run(api: FakeApi, mode: str, namespaces: list[str] | None = None) -> tuple[int, list[str]]:
    lines: list[str] = []
    clock = FakeClock()
    code = Uninstaller(
        api,
        Options(mode, namespaces or [], 10.0),
        out=lines.append,
        clock=clock,
        sleep=clock.sleep,
    ).run()
    return code, lines


def test_remove_mode_strips_only_our_finalizers_and_deletes_nothing() -> None:
    api = FakeApi(
        trainjob("a", "new", OURS, OTHER),
        trainjob("a", "old", OLD, OURS),
        trainjob("b", "plain", OTHER),
    )
    code, lines = run(api, "removeFinalizers")
    assert code == 0
    assert api.objects[("a", "new")]["metadata"]["finalizers"] == [OTHER]
    assert api.objects[("a", "old")]["metadata"]["finalizers"] == []
    assert api.objects[("b", "plain")]["metadata"]["finalizers"] == [OTHER]
    assert api.deleted == []
    assert [p[1] for p in api.patches] == ["new", "old"]
    assert f"removed {OURS} from trainjob a/new" in lines
    assert f"removed {OLD}, {OURS} from trainjob a/old" in lines


def test_the_patch_is_conditional_on_the_resource_version() -> None:
    api = FakeApi(trainjob("a", "x", OURS))
    api.objects[("a", "x")]["metadata"]["resourceVersion"] = "42"
    run(api, "removeFinalizers")
    (_, _, body) = api.patches[0]
    assert body == {"metadata": {"finalizers": [], "resourceVersion": "42"}}


def test_a_conflict_is_retried_on_the_next_pass() -> None:
    api = FakeApi(trainjob("a", "x", OURS, OTHER))
    api.conflicts = 2
    code, _ = run(api, "removeFinalizers")
    assert code == 0
    assert len(api.patches) == 3
    assert api.objects[("a", "x")]["metadata"]["finalizers"] == [OTHER]


def test_it_gives_up_after_its_passes_with_a_fix_in_the_message() -> None:
    api = FakeApi(trainjob("a", "stuck", OURS))
    api.conflicts = 100  # something keeps changing it (a live operator re-adding it, say)
    code, lines = run(api, "removeFinalizers")
    assert code == 1
    assert len(api.patches) == uninstall.STRIP_PASSES
    assert "a/stuck" in lines[-1] and "kubectl edit trainjobs.raytrain.dev" in lines[-1]


def test_only_the_watched_namespaces_are_touched() -> None:
    api = FakeApi(trainjob("a", "x", OURS), trainjob("b", "y", OURS))
    code, _ = run(api, "removeFinalizers", ["b"])
    assert code == 0
    assert api.objects[("a", "x")]["metadata"]["finalizers"] == [OURS]
    assert api.objects[("b", "y")]["metadata"]["finalizers"] == []


def test_no_crd_means_nothing_to_do() -> None:
    api = FakeApi()
    api.crd_gone = True
    assert run(api, "removeFinalizers") == (0, [])


def test_delete_mode_deletes_and_the_operator_lets_them_go() -> None:
    api = FakeApi(trainjob("a", "x", OURS), trainjob("a", "y", OURS, OLD))
    code, lines = run(api, "deleteTrainJobs")
    assert code == 0
    assert api.deleted == [("a", "x"), ("a", "y")]
    # y kept the pre-0.2 finalizer, which no running operator removes: stripped at the deadline
    assert api.objects == {}
    assert "deleting trainjob a/x" in lines
    assert any("still present after the deadline" in line for line in lines)


def test_delete_mode_without_an_operator_strips_at_the_deadline() -> None:
    api = FakeApi(trainjob("a", "x", OURS))
    api.operator_releases = False
    code, lines = run(api, "deleteTrainJobs")
    assert code == 0
    assert api.objects == {}
    assert "1 trainjobs still present after the deadline" in lines[1]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"TRAINJOBS": "purge"}, "TRAINJOBS: 'purge' is not a mode"),
        ({"TRAINJOBS": "deleteTrainJobs", "TIMEOUT_SECONDS": "soon"}, "TIMEOUT_SECONDS: 'soon'"),
        ({"TRAINJOBS": "deleteTrainJobs", "TIMEOUT_SECONDS": "-1"}, "TIMEOUT_SECONDS: '-1'"),
    ],
)
def test_bad_settings_are_refused_with_the_fix(
    env: dict[str, str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert uninstall.main(env) == 2
    err = capsys.readouterr().err
    assert message in err and "the chart's uninstall." in err


def test_settings_from_the_environment() -> None:
    env = {"TRAINJOBS": "deleteTrainJobs", "WATCH_NAMESPACES": "a, b,", "TIMEOUT_SECONDS": "5"}
    assert Options.from_env(env) == Options("deleteTrainJobs", ["a", "b"], 5.0)


# ---------------------------------------------------------------- stopping the operator first


class FakeApps:
    """The operator's Deployment: scaling to 0 leaves pods terminating for a few polls."""

    def __init__(self, api: FakeApi, pods: int = 1, polls_to_stop: int = 2) -> None:
        self.api, self.pods, self.polls_left = api, pods, polls_to_stop
        self.replicas = 1
        self.scaled: list[tuple[str, str, dict[str, Any]]] = []
        self.gone = False

    def patch_namespaced_deployment_scale(self, name: str, namespace: str, body: Any) -> Any:
        if self.gone:
            raise ApiException(status=404, reason="Not Found")
        self.scaled.append((namespace, name, body))
        self.replicas = body["spec"]["replicas"]
        # Until it has stopped, the live operator puts its finalizer back after every strip.
        return {}

    def read_namespaced_deployment(self, name: str, namespace: str) -> Any:
        if self.replicas == 0 and self.polls_left > 0:
            self.polls_left -= 1
        elif self.replicas == 0:
            self.pods = 0
        status = type("Status", (), {"replicas": 0, "terminating_replicas": self.pods})()
        return type("Deployment", (), {"status": status})()


class OperatorReAdding(FakeApi):
    """A running operator: a stripped finalizer comes back while any operator pod runs."""

    apps: FakeApps

    def patch_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, name: str, body: Any
    ) -> Any:
        obj = super().patch_namespaced_custom_object(group, version, namespace, plural, name, body)
        if self.apps.pods and OURS not in obj["metadata"]["finalizers"]:
            obj["metadata"]["finalizers"].append(OURS)
        return obj


def run_with_operator(api: OperatorReAdding, apps: FakeApps, mode: str) -> tuple[int, list[str]]:
    lines: list[str] = []
    clock = FakeClock()
    options = Options(mode, [], 10.0, operator=("raytrain-system", "rt-raytrain-operator"))
    code = Uninstaller(
        api, options, apps=apps, out=lines.append, clock=clock, sleep=clock.sleep
    ).run()
    return code, lines


def test_the_operator_is_stopped_before_finalizers_are_stripped() -> None:
    api = OperatorReAdding(trainjob("a", "x", OURS))
    apps = api.apps = FakeApps(api)
    code, lines = run_with_operator(api, apps, "removeFinalizers")
    assert code == 0
    assert apps.scaled == [("raytrain-system", "rt-raytrain-operator", {"spec": {"replicas": 0}})]
    assert api.objects[("a", "x")]["metadata"]["finalizers"] == []
    assert lines[0].startswith("scaled deployment raytrain-system/rt-raytrain-operator to 0")


def test_without_stopping_it_the_operator_puts_the_finalizer_back() -> None:
    """What the scale-down is for: the same run with no Deployment to stop fails."""
    api = OperatorReAdding(trainjob("a", "x", OURS))
    apps = api.apps = FakeApps(api)
    apps.gone = True  # the scale call finds nothing, the (fake) operator keeps running
    code, _ = run_with_operator(api, apps, "removeFinalizers")
    assert code == 1
    assert api.objects[("a", "x")]["metadata"]["finalizers"] == [OURS]


def test_delete_mode_stops_the_operator_only_after_it_handled_the_deletes() -> None:
    api = OperatorReAdding(trainjob("a", "x", OURS))
    apps = api.apps = FakeApps(api)
    code, lines = run_with_operator(api, apps, "deleteTrainJobs")
    assert code == 0
    assert api.deleted == [("a", "x")] and api.objects == {}
    assert lines.index("deleting trainjob a/x") < next(
        i for i, line in enumerate(lines) if line.startswith("scaled deployment")
    )


def test_an_operator_that_does_not_stop_is_waited_for_a_bounded_time() -> None:
    api = OperatorReAdding(trainjob("a", "x", OURS))
    apps = api.apps = FakeApps(api, polls_to_stop=10**6)
    code, lines = run_with_operator(api, apps, "removeFinalizers")
    assert code == 1
    assert any("still has 1 pods; going on" in line for line in lines)


def test_operator_deployment_from_the_environment() -> None:
    env = {"TRAINJOBS": "removeFinalizers", "OPERATOR_DEPLOYMENT": "raytrain-system/rt"}
    assert Options.from_env(env).operator == ("raytrain-system", "rt")
    assert Options.from_env({"TRAINJOBS": "removeFinalizers"}).operator is None
    with pytest.raises(ValueError, match="OPERATOR_DEPLOYMENT: 'rt' is not namespace/name"):
        Options.from_env({"TRAINJOBS": "removeFinalizers", "OPERATOR_DEPLOYMENT": "rt"})
