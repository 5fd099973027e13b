"""Record builders and state snapshots shared by the state-store tests."""

from __future__ import annotations

import uuid

from iadeep.state import GpuInfo, JobRecord, NodeInventory, StateSettings


def etcd_settings(endpoint: str | list[str], prefix: str | None = None, **kw) -> StateSettings:
    endpoints = [endpoint] if isinstance(endpoint, str) else endpoint
    return StateSettings(endpoints=endpoints, prefix=prefix or f"/t-{uuid.uuid4().hex[:12]}", **kw)


def inventory(node: str, gpus: int = 4, mem_gib: float = 32.0) -> NodeInventory:
    return NodeInventory(node, tuple(GpuInfo(i, mem_gib, f"GPU-{node}-{i}") for i in range(gpus)))


def job(pod_uid: str, mem_gib: float = 8.0, num_gpus: int = 1, model: str = "ResNet-50") -> JobRecord:
    return JobRecord(pod_uid, "default", f"job-{pod_uid}", model, 32, num_gpus, mem_gib, 3600.0, 1700000000.0)


def snapshot(store) -> dict:
    """Everything a store holds (to check that a failed call wrote nothing)."""
    return {
        "inventories": store.inventories(),
        "jobs": store.jobs(),
        "gpus": store.gpu_states(),
        "assignments": store.assignments(),
        "tuning": store.tuning_requests(),
        "samples": store.samples(),
    }


def etcd_serving_cert(pki_dir, ca_cert, ca_key) -> tuple:
    """A certificate for etcd on 127.0.0.1, signed by the dev CA, valid for server *and* client
    use: with ``--client-cert-auth`` etcd's own JSON gateway dials etcd with it."""
    import datetime as dt
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    ca = x509.load_pem_x509_certificate(ca_cert.read_bytes())
    ca_private = serialization.load_pem_private_key(ca_key.read_bytes(), None)
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "etcd")]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), False)
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            False,
        )
        .sign(ca_private, hashes.SHA256())
    )
    cert_path, key_path = pki_dir / "etcd.crt", pki_dir / "etcd.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path
