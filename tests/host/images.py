"""Images the host tier builds itself: no registry is reachable, so nothing is pulled.

`busybox`: Debian's busybox-static (the .deb fetched with `apt-get download` into the tier's
cache and unpacked there, nothing installed on the host) as a root file system with one
symlink per applet, `docker import`ed under a tag keyed by the binary's hash.
"""

from __future__ import annotations

import hashlib
import io
import subprocess
import tarfile
from pathlib import Path

from docker_host import Docker

BUSYBOX_PACKAGE = "busybox-static"
LAYOUT = "1"  # bump when the rootfs layout below changes: a new tag, a new image
DIRECTORIES = ("bin", "dev", "etc", "proc", "sys", "tmp", "mnt", "run", "root", "var")


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)


def busybox_binary(cache: Path) -> Path:
    """The static busybox from Debian's package, unpacked under `cache`/debs."""
    debs = cache / "debs"
    binary = debs / BUSYBOX_PACKAGE / "bin" / "busybox"
    if binary.exists():
        return binary
    debs.mkdir(parents=True, exist_ok=True)
    fetched = _run(["apt-get", "download", BUSYBOX_PACKAGE], debs)
    if fetched.returncode != 0:  # a fresh machine has no package lists yet
        _run(["apt-get", "update"], debs)
        fetched = _run(["apt-get", "download", BUSYBOX_PACKAGE], debs)
    package = sorted(debs.glob(f"{BUSYBOX_PACKAGE}_*.deb"))
    if fetched.returncode != 0 or not package:
        raise RuntimeError(f"apt-get download {BUSYBOX_PACKAGE} failed: {fetched.stderr}")
    unpacked = _run(["dpkg-deb", "-x", str(package[-1]), str(debs / BUSYBOX_PACKAGE)], debs)
    if unpacked.returncode != 0:
        raise RuntimeError(f"dpkg-deb -x failed: {unpacked.stderr}")
    return binary


def busybox_rootfs(binary: bytes, applets: list[str]) -> bytes:
    """A tar of the root file system: /bin/busybox, /bin/<applet> -> busybox, /etc/passwd."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for directory in DIRECTORIES:
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if directory == "tmp" else 0o755
            tar.addfile(info)
        info = tarfile.TarInfo("bin/busybox")
        info.size, info.mode = len(binary), 0o755
        tar.addfile(info, io.BytesIO(binary))
        for applet in sorted(set(applets) - {"busybox"}):
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type, link.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(link)
        passwd = b"root:x:0:0:root:/root:/bin/sh\n"
        info = tarfile.TarInfo("etc/passwd")
        info.size, info.mode = len(passwd), 0o644
        tar.addfile(info, io.BytesIO(passwd))
    return buffer.getvalue()


def busybox_applets(binary: Path) -> list[str]:
    """The applets the binary has (`busybox --list`): one symlink each in the root file system."""
    found = subprocess.run([str(binary), "--list"], capture_output=True, text=True, check=True)
    return found.stdout.split()


def busybox_image(docker: Docker, cache: Path) -> str:
    """The tag of the busybox image, imported once per binary and layout."""
    binary = busybox_binary(cache)
    content = binary.read_bytes()
    key = hashlib.sha256(content + LAYOUT.encode()).hexdigest()[:16]
    tag = f"kamaji-hami-lab-host/busybox:{key}"
    if docker.run("image", "inspect", tag, check=False).returncode == 0:
        return tag
    rootfs = busybox_rootfs(content, busybox_applets(binary))
    docker.run("import", "--change", 'CMD ["sh"]', "-", tag, input=rootfs)
    return tag
