"""The device plugin against a kubelet peer (a real gRPC Registration server on a unix socket,
and DevicePlugin clients as the kubelet's device manager): registration, device lists, health
changes streamed (to every GiB unit and co-location slot of the GPU), re-registration after a kubelet restart, inventory on a lease, a replaced GPU."""

from __future__ import annotations

import json
import queue
import threading

import grpc
import pytest

from iadeep.deviceplugin import device_gpu
from iadeep.deviceplugin._proto import PACKAGE_ROOT, generate, header
from iadeep.state import PlacementPolicy
from iadeep.testing import wait_for
from iadeep.testing.kubelet import pb2


def test_stubs_are_generated_from_the_current_proto(tmp_path) -> None:
    """Fails when the stubs in the package are stale (the .proto or grpcio-tools changed)."""
    fresh = generate(tmp_path)
    for path in fresh:
        shipped = PACKAGE_ROOT / path.relative_to(tmp_path)
        assert shipped.read_text() == path.read_text(), f"{shipped} is stale: run python -m iadeep.deviceplugin._proto"
        assert shipped.read_text().startswith(header())


def test_wire_format_matches_the_published_api() -> None:
    """Field numbers of the published v1beta1 API (no kubelet runs here: the bytes are checked)."""
    req = pb2.RegisterRequest(version="v1beta1", endpoint="e.sock", resource_name="iadeep.io/gpu-mem",
                              options=pb2.DevicePluginOptions(get_preferred_allocation_available=True))
    # field 1 "v1beta1", 2 "e.sock", 3 the resource, 4 { 2: true }
    assert req.SerializeToString() == (b"\n\x07v1beta1\x12\x06e.sock\x1a\x11iadeep.io/gpu-mem\"\x02\x10\x01")
    car = pb2.ContainerAllocateResponse(envs={"A": "b"})
    assert car.SerializeToString() == b"\n\x06\n\x01A\x12\x01b"  # map<string,string> envs = 1
    pref = pb2.ContainerPreferredAllocationRequest(available_deviceIDs=["x"], must_include_deviceIDs=["y"], allocation_size=2)
    assert pref.SerializeToString() == b"\n\x01x\x12\x01y\x18\x02"
    assert pb2.DESCRIPTOR.services_by_name["DevicePlugin"].full_name == "v1beta1.DevicePlugin"
    assert [m.name for m in pb2.DESCRIPTOR.services_by_name["DevicePlugin"].methods] == [
        "GetDevicePluginOptions", "ListAndWatch", "GetPreferredAllocation", "Allocate", "PreStartContainer"]


def registered(kubelet) -> dict[str, str]:
    regs = {}
    for _ in range(2):
        r = kubelet.registration()
        assert r.version == "v1beta1" and r.options.get_preferred_allocation_available
        regs[r.resource_name] = r.endpoint
    return regs


def test_registers_both_resources_and_lists_devices(kubelet, make_plugin, etcd_store) -> None:
    """gpu-mem: one ID per GiB; gpu-count: one ID per co-location slot of each GPU, as many as
    the extender's published limit (the kubelet gives a device to one container only)."""
    etcd_store.put_placement(PlacementPolicy("iadeep", 3, 1.0))
    svc = make_plugin(count=2, mem_gib=16)
    regs = registered(kubelet)
    assert set(regs) == {"iadeep.io/gpu-mem", "iadeep.io/gpu-count"}
    mem = next(iter(kubelet.plugin(regs["iadeep.io/gpu-mem"]).ListAndWatch(pb2.Empty(), timeout=10)))
    ids = [d.ID for d in mem.devices]
    uuids = [g.uuid for g in svc.gpus]
    assert len(ids) == 32 and len(set(ids)) == 32
    assert all(len(i) <= 63 for i in ids)
    assert {i.rsplit("-mem-", 1)[0] for i in ids} == set(uuids)  # each ID tied to its GPU's UUID
    assert all(d.health == "Healthy" for d in mem.devices)
    count = next(iter(kubelet.plugin(regs["iadeep.io/gpu-count"]).ListAndWatch(pb2.Empty(), timeout=10)))
    assert [d.ID for d in count.devices] == [f"{u}-slot-{k}" for u in uuids for k in range(3)]
    inv = etcd_store.inventories()["n1"]
    assert [(g.index, g.mem_gib, g.uuid) for g in inv.gpus] == [(0, 16.0, uuids[0]), (1, 16.0, uuids[1])]


def follow(stub) -> tuple[queue.Queue, grpc.Future]:
    """The ListAndWatch responses of one resource, as they come."""
    stream = stub.ListAndWatch(pb2.Empty(), timeout=30)
    updates: queue.Queue = queue.Queue()

    def pump() -> None:
        try:
            for r in stream:
                updates.put(r)
        except grpc.RpcError:
            pass  # cancelled at the end of the test

    threading.Thread(target=pump, daemon=True).start()
    return updates, stream


def test_health_change_is_streamed(kubelet, make_plugin, state_file, etcd_store) -> None:
    """GPU 1 turns unhealthy: all its GiB units and all its co-location slots are marked."""
    etcd_store.put_placement(PlacementPolicy("iadeep", 2, 1.0))
    svc = make_plugin()
    regs = registered(kubelet)
    (mem, mem_stream), (count, count_stream) = (follow(kubelet.plugin(regs[r]))
                                                for r in ("iadeep.io/gpu-mem", "iadeep.io/gpu-count"))
    for updates in (mem, count):
        assert all(d.health == "Healthy" for d in updates.get(timeout=10).devices)
    state_file.write_text(json.dumps({"unhealthy": [1]}))
    second = mem.get(timeout=10)
    sick = {device_gpu(d.ID) for d in second.devices if d.health == "Unhealthy"}
    well = {device_gpu(d.ID) for d in second.devices if d.health == "Healthy"}
    assert sick == {svc.gpus[1].uuid} and well == {svc.gpus[0].uuid}
    assert sum(d.health == "Unhealthy" for d in second.devices) == 16
    slots = count.get(timeout=10).devices
    assert sorted(d.ID for d in slots if d.health == "Unhealthy") == [f"{svc.gpus[1].uuid}-slot-{k}" for k in range(2)]
    assert sorted(d.ID for d in slots if d.health == "Healthy") == [f"{svc.gpus[0].uuid}-slot-{k}" for k in range(2)]
    # the extender restarts with another limit: the slots follow (streamed at the next lease renewal)
    etcd_store.put_placement(PlacementPolicy("antman", 3, 2.0))
    third = count.get(timeout=15).devices
    assert len(third) == 6 and {device_gpu(d.ID) for d in third if d.health == "Unhealthy"} == {svc.gpus[1].uuid}
    mem_stream.cancel()
    count_stream.cancel()


def test_kubelet_restart_makes_it_register_again(kubelet, make_plugin) -> None:
    svc = make_plugin()
    registered(kubelet)
    kubelet.restart()
    regs = registered(kubelet)  # within a few polls
    assert set(regs) == {"iadeep.io/gpu-mem", "iadeep.io/gpu-count"}
    wait_for(lambda: svc.registrations, lambda n: n == 2, timeout=10, what="second registration counted")
    devices = next(iter(kubelet.plugin(regs["iadeep.io/gpu-mem"]).ListAndWatch(pb2.Empty(), timeout=10))).devices
    assert len(devices) == 32


def test_replaced_gpu_replaces_the_inventory(kubelet, make_plugin, state_file, etcd_store) -> None:
    svc = make_plugin()
    registered(kubelet)
    old = svc.gpus[1].uuid
    svc.stop()  # "reboot" with GPU 1 replaced
    state_file.write_text(json.dumps({"uuids": {"1": "GPU-11111111-2222-3333-4444-555555555555"}}))
    svc2 = make_plugin()
    registered(kubelet)
    inv = etcd_store.inventories()["n1"]
    assert inv.gpus[1].uuid == "GPU-11111111-2222-3333-4444-555555555555" != old
    assert inv.gpus[0].uuid == svc2.gpus[0].uuid
    # and while running: a UUID change is published within a poll
    state_file.write_text(json.dumps({"uuids": {"1": "GPU-99999999-2222-3333-4444-555555555555"}}))
    wait_for(lambda: etcd_store.inventories()["n1"].gpus[1].uuid, lambda u: u.startswith("GPU-9999"), timeout=10,
             what="inventory replaced")


def test_inventory_lease_expires_when_the_plugin_is_gone(kubelet, make_plugin, etcd_store) -> None:
    svc = make_plugin()
    registered(kubelet)
    assert "n1" in etcd_store.inventories()
    svc.stop()
    wait_for(etcd_store.inventories, lambda inv: "n1" not in inv, timeout=20, what="inventory lease expired")


@pytest.mark.parametrize("units", [3])
def test_allocate_without_a_bound_pod_is_refused_with_a_reason(kubelet, make_plugin, units) -> None:
    make_plugin()
    regs = registered(kubelet)
    stub = kubelet.plugin(regs["iadeep.io/gpu-mem"])
    ids = [d.ID for d in next(iter(stub.ListAndWatch(pb2.Empty(), timeout=10))).devices][:units]
    with pytest.raises(grpc.RpcError) as err:
        stub.Allocate(pb2.AllocateRequest(container_requests=[pb2.ContainerAllocateRequest(devices_ids=ids)]), timeout=10)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "no pod bound to node n1" in err.value.details() and f"asks for {units} GiB" in err.value.details()


@pytest.mark.parametrize(("ids", "says"), [
    (lambda adv: ["no-such-device"] * 4, "device IDs this plugin does not advertise: no-such-device; device IDs named "
                                         "more than once: no-such-device"),
    (lambda adv: [adv[0], adv[0]], "device IDs named more than once: "),
    (lambda adv: [], "no device IDs in the container request"),
])
def test_allocate_of_devices_the_plugin_does_not_advertise_is_an_invalid_argument(kubelet, make_plugin, ids, says) -> None:
    """The kubelet only asks for advertised devices, each once; a request that does not is refused
    naming the IDs, before any pod is matched (it would otherwise be served by its count alone)."""
    make_plugin()
    regs = registered(kubelet)
    stub = kubelet.plugin(regs["iadeep.io/gpu-mem"])
    advertised = [d.ID for d in next(iter(stub.ListAndWatch(pb2.Empty(), timeout=10))).devices]
    with pytest.raises(grpc.RpcError) as err:
        stub.Allocate(pb2.AllocateRequest(container_requests=[pb2.ContainerAllocateRequest(devices_ids=ids(advertised))]),
                      timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert says in err.value.details()


class _ApiDown:
    """A PodApi whose API server does not answer (as the kubernetes client raises then)."""

    def allocating_pods(self, node):
        raise ConnectionError("API server 127.0.0.1:1 unreachable")

    def mark_allocated(self, pod):
        raise AssertionError("never reached")


def test_an_unreachable_api_server_is_a_reason_for_both_calls(kubelet, make_plugin) -> None:
    """Allocate and GetPreferredAllocation both answer UNAVAILABLE naming the cause (not grpc's
    generic UNKNOWN 'Exception calling application', with a traceback)."""
    make_plugin(pods=_ApiDown())
    stub = kubelet.plugin(registered(kubelet)["iadeep.io/gpu-mem"])
    ids = [d.ID for d in next(iter(stub.ListAndWatch(pb2.Empty(), timeout=10))).devices]
    calls = [lambda: stub.GetPreferredAllocation(pb2.PreferredAllocationRequest(container_requests=[
                 pb2.ContainerPreferredAllocationRequest(available_deviceIDs=ids, allocation_size=2)]), timeout=10),
             lambda: stub.Allocate(pb2.AllocateRequest(container_requests=[
                 pb2.ContainerAllocateRequest(devices_ids=ids[:2])]), timeout=10)]
    for call in calls:
        with pytest.raises(grpc.RpcError) as err:
            call()
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "API server 127.0.0.1:1 unreachable" in err.value.details()
