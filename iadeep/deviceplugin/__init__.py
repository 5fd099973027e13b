"""The kubelet device plugin (API v1beta1): advertises ``iadeep.io/gpu-mem`` (one unit per GiB)
and ``iadeep.io/gpu-count`` (co-location slots: GPUs x the extender's jobs per GPU), publishes the node's GPU inventory in etcd, and allocates to each
container the GPU the extender chose for its pod (:mod:`iadeep.deviceplugin._allocate`).
:func:`load_api_stubs` returns the kubelet API's generated modules ``(api_pb2, api_pb2_grpc)``.
"""

from iadeep.deviceplugin._allocate import Allocator, BoundPod, KubernetesPodApi, NoMatchingPod, PodApi, device_gpu
from iadeep.deviceplugin._proto import load as load_api_stubs
from iadeep.deviceplugin._gpus import EmulatedBackend, Gpu, GpuBackend, NvmlBackend, NvmlUnavailable
from iadeep.deviceplugin._service import DevicePluginService, mem_device_ids, slot_device_ids
from iadeep.deviceplugin._settings import DevicePluginSettings, EmulatedGpus, KubeAccess

__all__ = ["Allocator", "BoundPod", "KubernetesPodApi", "NoMatchingPod", "PodApi", "device_gpu", "EmulatedBackend",
           "Gpu", "GpuBackend", "NvmlBackend", "NvmlUnavailable", "DevicePluginService", "mem_device_ids",
           "slot_device_ids",
           "DevicePluginSettings", "EmulatedGpus", "KubeAccess", "load_api_stubs"]
