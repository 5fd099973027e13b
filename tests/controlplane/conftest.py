"""Fixtures for tests against the real control plane (kube-apiserver, kube-scheduler,
kube-controller-manager built by ``make controlplane``; kwok nodes)."""

from iadeep.testing.controlplane import (  # noqa: F401 - pytest finds fixtures by name
    control_plane,
    control_plane_options,
    controlplane_binaries,
    k8s_client,
    k8s_namespace,
)
