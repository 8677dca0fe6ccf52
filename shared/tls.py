"""Mutual TLS between the services: certificates, credentials, hot reload on rotation.

A TLS directory holds `ca.pem` (the CA every service trusts) and, per service,
`<service>.pem` + `<service>.key`, whose common name is the service's name.
Servers require a client certificate from the same CA and then accept only the
callers `CALLERS` lists for them; clients verify the server's certificate
against its service name, whatever address they dialled (IP lists, DNS names).
Rotating the files in place (a Kubernetes secret update, `ragkb certs init
--force`) takes effect on the next connection, with no restart.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import grpc

from shared.files import file_stamp

SERVICES = ("gateway", "worker", "parser", "indexer", "retriever", "reranker", "generator")
# Who may call each inner service (certificate common names).
CALLERS = {
    "parser": ("gateway", "worker"),
    "indexer": ("gateway", "worker"),
    "retriever": ("gateway", "reranker"),
    "reranker": ("gateway",),
    "generator": ("gateway",),
}


@dataclass(frozen=True)
class ServiceCertificate:
    """The CA, certificate and key files of one service in a TLS directory."""

    directory: Path
    service: str

    @property
    def ca(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def cert(self) -> Path:
        return self.directory / f"{self.service}.pem"

    @property
    def key(self) -> Path:
        return self.directory / f"{self.service}.key"

    def stamp(self) -> tuple:
        """Changes when any of the three files is replaced or rewritten."""
        return tuple(file_stamp(p) for p in (self.ca, self.cert, self.key))

    def read(self) -> tuple[bytes, bytes, bytes]:
        missing = [str(p) for p in (self.ca, self.cert, self.key) if not p.exists()]
        if missing:
            raise ValueError(f"TLS files missing for {self.service}: {', '.join(missing)} "
                             "(create them with `ragkb certs init DIR`)")
        return self.ca.read_bytes(), self.cert.read_bytes(), self.key.read_bytes()


def server_credentials(tls_dir: str | Path, service: str) -> grpc.ServerCredentials:
    """mTLS server credentials that re-read the files when they change (checked at each new connection)."""
    files = ServiceCertificate(Path(tls_dir), service)
    state = {"stamp": files.stamp()}

    def configuration():
        ca, cert, key = files.read()
        return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=ca)

    def fetch():
        stamp = files.stamp()
        if stamp == state["stamp"]:
            return None
        try:
            fresh = configuration()
        except (OSError, ValueError):
            return None  # half-written rotation: keep serving with the old files, retry next connection
        state["stamp"] = stamp
        return fresh

    return grpc.dynamic_ssl_server_credentials(configuration(), fetch, require_client_authentication=True)


def channel_credentials(tls_dir: str | Path, service: str) -> grpc.ChannelCredentials:
    ca, cert, key = ServiceCertificate(Path(tls_dir), service).read()
    return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)


def init_certs(directory: str | Path, *, hosts: Iterable[str] = (), days: int = 365, force: bool = False,
               services: Iterable[str] = SERVICES) -> list[Path]:
    """A development CA and one certificate per service (SANs: its name, localhost, 127.0.0.1, `hosts`)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if (directory / "ca.pem").exists() and not force:
        raise FileExistsError(f"{directory / 'ca.pem'} exists; pass --force to replace every certificate")
    now = datetime.datetime.now(datetime.timezone.utc)
    not_after = now + datetime.timedelta(days=days)

    def name(common_name: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "ragkb"),
                          x509.NameAttribute(NameOID.COMMON_NAME, common_name)])

    def pem_key(key) -> bytes:
        return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (x509.CertificateBuilder().subject_name(name("ragkb development CA")).issuer_name(name("ragkb development CA"))
               .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(not_after)
               .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                            content_commitment=False, key_encipherment=False,
                                            data_encipherment=False, key_agreement=False,
                                            encipher_only=False, decipher_only=False), critical=True)
               .sign(ca_key, hashes.SHA256()))
    written = [_write(directory / "ca.pem", ca_cert.public_bytes(serialization.Encoding.PEM), 0o644)]
    extra = [h for h in hosts if h]
    for service in services:
        key = ec.generate_private_key(ec.SECP256R1())
        names: list[x509.GeneralName] = []
        for host in dict.fromkeys([service, f"{service}-headless", "localhost", "127.0.0.1", *extra]):
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        cert = (x509.CertificateBuilder().subject_name(name(service)).issuer_name(ca_cert.subject)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(not_after)
                .add_extension(x509.SubjectAlternativeName(names), critical=False)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                      ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
                .sign(ca_key, hashes.SHA256()))
        written.append(_write(directory / f"{service}.pem", cert.public_bytes(serialization.Encoding.PEM), 0o644))
        written.append(_write(directory / f"{service}.key", pem_key(key), 0o600))
    return written


def _write(path: Path, data: bytes, mode: int) -> Path:
    """Write-then-rename, so a server reloading mid-rotation never reads half a file."""
    staging = path.with_name(path.name + ".tmp")
    staging.write_bytes(data)
    os.chmod(staging, mode)
    os.replace(staging, path)
    return path
