"""Certificates and keys for a throw-away, loopback-only control plane.

Everything is ECDSA P-256 (generation takes milliseconds, unlike RSA) and valid for a few days:
one CA, the apiserver's serving certificate, one client certificate per identity, and the
service-account signing key pair.
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = _dt.timedelta(days=7)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _name(cn: str, orgs: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


def _write(path: Path, data: bytes, *, private: bool = False) -> Path:
    path.write_bytes(data)
    if private:
        path.chmod(0o600)
    return path


@dataclass(frozen=True)
class ClientCert:
    """A client identity: certificate and key files (PEM)."""

    cert: Path
    key: Path


@dataclass(frozen=True)
class Pki:
    """Paths of everything :func:`generate` wrote."""

    dir: Path
    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    sa_key: Path
    sa_pub: Path
    clients: dict[str, ClientCert]


class _Ca:
    def __init__(self) -> None:
        self.key = _key()
        now = _dt.datetime.now(_dt.UTC)
        self.name = _name("iadeep-dev-ca")
        self.cert = (
            _builder(self.name, self.name, self.key.public_key(), now, ca=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False)
            .sign(self.key, hashes.SHA256())
        )

    def issue(
        self,
        cn: str,
        *,
        orgs: tuple[str, ...] = (),
        server: bool = False,
        dns: tuple[str, ...] = (),
        ips: tuple[str, ...] = (),
    ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        key = _key()
        now = _dt.datetime.now(_dt.UTC)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            _builder(_name(cn, orgs), self.name, key.public_key(), now, ca=False)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False
            )
        )
        if dns or ips:
            names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
            names += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        return builder.sign(self.key, hashes.SHA256()), key


def _builder(subject: x509.Name, issuer: x509.Name, public_key, now: _dt.datetime, *, ca: bool) -> x509.CertificateBuilder:
    """A certificate valid from 5 minutes ago for ``_VALIDITY``, with CA or leaf basic constraints and key usage."""
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _dt.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=ca,
                crl_sign=ca,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    )


# Identities the control plane's own components use. The CN/O pairs are the ones the
# apiserver's bootstrap RBAC policy grants the right permissions to.
CLIENT_IDENTITIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "admin": ("iadeep-dev-admin", ("system:masters",)),
    "kube-controller-manager": ("system:kube-controller-manager", ()),
    "kube-scheduler": ("system:kube-scheduler", ()),
    # kwok plays every fake node's kubelet; it needs to create/patch nodes, leases and pod status.
    "kwok": ("iadeep-dev-kwok", ("system:masters",)),
    # The apiserver's client certificate towards kubelets (logs, exec, port-forward); a real
    # node's kubelet trusts the cluster CA for it (see iadeep.dev._node).
    "kube-apiserver-kubelet-client": ("kube-apiserver-kubelet-client", ("system:masters",)),
}


def generate(directory: Path, *, service_ip: str | None = None) -> Pki:
    """Write a CA, a serving certificate for 127.0.0.1/localhost, client certificates for
    :data:`CLIENT_IDENTITIES` and the service-account key pair into ``directory``.

    ``service_ip``: an extra IP SAN of the serving certificate (the control plane passes its
    ``kubernetes`` Service address, :data:`iadeep.dev._cluster.SERVICE_IP`, which nothing connects
    to: configuration only); none by default."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = _Ca()
    pem = serialization.Encoding.PEM
    ca_cert = _write(directory / "ca.crt", ca.cert.public_bytes(pem))
    ca_key = _write(directory / "ca.key", _key_pem(ca.key), private=True)

    serving, serving_key = ca.issue(
        "kube-apiserver",
        server=True,
        dns=(
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ),
        ips=("127.0.0.1",) if service_ip is None else ("127.0.0.1", service_ip),
    )
    serving_cert_path = _write(directory / "apiserver.crt", serving.public_bytes(pem))
    serving_key_path = _write(directory / "apiserver.key", _key_pem(serving_key), private=True)

    clients: dict[str, ClientCert] = {}
    for ident, (cn, orgs) in CLIENT_IDENTITIES.items():
        cert, key = ca.issue(cn, orgs=orgs)
        clients[ident] = ClientCert(
            cert=_write(directory / f"{ident}.crt", cert.public_bytes(pem)),
            key=_write(directory / f"{ident}.key", _key_pem(key), private=True),
        )

    sa = _key()
    sa_key = _write(directory / "sa.key", _key_pem(sa), private=True)
    sa_pub = _write(
        directory / "sa.pub",
        sa.public_key().public_bytes(pem, serialization.PublicFormat.SubjectPublicKeyInfo),
    )
    return Pki(
        dir=directory,
        ca_cert=ca_cert,
        ca_key=ca_key,
        serving_cert=serving_cert_path,
        serving_key=serving_key_path,
        sa_key=sa_key,
        sa_pub=sa_pub,
        clients=clients,
    )


def issue_from_ca(
    ca_cert: Path,
    ca_key: Path,
    out: Path,
    cn: str,
    *,
    orgs: tuple[str, ...] = (),
    server: bool = False,
    dns: tuple[str, ...] = (),
    ips: tuple[str, ...] = (),
) -> ClientCert:
    """Issue one more certificate from a CA that :func:`generate` wrote (e.g. a node's kubelet
    identity ``system:node:<name>`` in ``system:nodes``, or its serving certificate).

    Writes ``<out>.crt`` and ``<out>.key`` (PEM; the key mode 0600).
    """
    ca = _Ca.__new__(_Ca)
    loaded = serialization.load_pem_private_key(ca_key.read_bytes(), password=None)
    if not isinstance(loaded, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{ca_key}: not an ECDSA key")
    ca.key = loaded
    ca.name = x509.load_pem_x509_certificate(ca_cert.read_bytes()).subject
    cert, key = ca.issue(cn, orgs=orgs, server=server, dns=dns, ips=ips)
    pem = serialization.Encoding.PEM
    out.parent.mkdir(parents=True, exist_ok=True)
    return ClientCert(
        cert=_write(out.with_suffix(".crt"), cert.public_bytes(pem)),
        key=_write(out.with_suffix(".key"), _key_pem(key), private=True),
    )
