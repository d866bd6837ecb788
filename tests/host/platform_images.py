"""MetalLB's images and chart, and the Helm that installs it, built here from their Go modules.

No registry is reachable, so the tier builds what `quay.io/metallb/{controller,speaker}` hold at
the version the program pins (Pulumi.yaml's metallbVersion): the two programs of
`go.universe.tf/metallb`, static as upstream's Dockerfiles build them, each the one binary of a
one-layer image under the name the chart gives it (node_image.binary_layer, docker_archive).
Upstream's images are distroless/static with the binary at `/controller` and `/speaker`; here it
is /usr/local/bin/<name>, the entrypoint says so, and the chart sets only args. The chart is the
module's own `charts/metallb` (its `crds` and `frr-k8s` subcharts packed in), what the chart
repository serves at that version.

Helm is `helm.sh/helm/v3` at the version pulumi-kubernetes' provider embeds (its go.mod), so the
chart renders and installs with the library the program's `Release` uses.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from node_image import (
    BuildPaths,
    binaries,
    binary_layer,
    docker_archive,
    go_env,
    standard_library_program,
)

METALLB_MODULE = "go.universe.tf/metallb"
# pulumi-kubernetes' provider (provider/v4 at f47bc2d6f199, its go.mod) requires this version.
HELM_VERSION = "v3.18.6"
MIRRORED_REGISTRY = "quay.io/metallb"


def metallb_set(version: str) -> binaries.BinarySet:
    """controller and speaker at `version` (the chart's appVersion, v-prefixed)."""
    return binaries.BinarySet(
        name=f"metallb-{version}",
        module=METALLB_MODULE,
        version=version,
        packages=(f"{METALLB_MODULE}/controller", f"{METALLB_MODULE}/speaker"),
        local_replace_version=version,
    )


HELM_SET = binaries.BinarySet(
    name="helm",
    module="helm.sh/helm/v3",
    version=HELM_VERSION,
    packages=("helm.sh/helm/v3/cmd/helm",),
    local_replace_version=HELM_VERSION,
    ldflags=(f"-X helm.sh/helm/v3/internal/version.version={HELM_VERSION}",),
)


@dataclass(frozen=True)
class MetalLBBuild:
    """What the tier installs MetalLB from: the chart directory and the image archives."""

    version: str
    chart: Path
    images: dict[str, Path]  # image reference -> docker-archive tar
    helm: Path


def build_metallb(tier_cache: Path, chart_version: str) -> MetalLBBuild:
    """The binaries (cached by binaries.build_set), the chart from the module, the archives."""
    paths = BuildPaths.under(tier_cache)
    version = chart_version if chart_version.startswith("v") else f"v{chart_version}"
    env, go_version = go_env()
    metallb = metallb_set(version)
    for binary_set in (metallb, HELM_SET):
        binaries.build_set(binary_set, paths.go_root, env, go_version)
    module_dir = Path(
        binaries._run(
            ["go", "list", "-m", "-f", "{{.Dir}}", METALLB_MODULE],
            paths.go_root / "src" / metallb.name,
            env,
        ).strip()
    )
    archives = paths.root / "platform-images"
    archives.mkdir(parents=True, exist_ok=True)
    images = {}
    for program in ("controller", "speaker"):
        reference = f"{MIRRORED_REGISTRY}/{program}:{version}"
        archive = archives / f"metallb-{program}-{version}.tar"
        binary = paths.bin / program
        if not archive.exists() or archive.stat().st_mtime < binary.stat().st_mtime:
            layer = binary_layer(program, binary.read_bytes())
            archive.write_bytes(docker_archive(reference, layer, (f"/usr/local/bin/{program}",)))
        images[reference] = archive
    return MetalLBBuild(version, module_dir / "charts" / "metallb", images, paths.bin / "helm")


# What answers behind a tenant's address until the tenant control plane runs here as Kamaji runs
# it: HTTPS on the TCP's port, `ok` on /healthz as kube-apiserver answers it without credentials
# (the program's healthz wait reads just that), a certificate made at start for the address.
HEALTHZ_GO = """\
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"log"
	"math/big"
	"net/http"
	"os"
	"time"
)

func main() {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		log.Fatal(err)
	}
	template := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(24 * time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		log.Fatal(err)
	}
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	http.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok"))
	})
	server := &http.Server{
		Addr:      ":" + os.Getenv("PORT"),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}},
	}
	log.Fatal(server.ListenAndServeTLS("", ""))
}
"""
HEALTHZ_IMAGE = "kamaji-hami-lab-host/healthz"


def build_healthz(tier_cache: Path) -> tuple[str, Path]:
    """The healthz server's image reference (keyed by its source) and its docker-archive tar."""
    paths = BuildPaths.under(tier_cache)
    key = hashlib.sha256(HEALTHZ_GO.encode()).hexdigest()[:16]
    reference = f"{HEALTHZ_IMAGE}:{key}"
    archive = paths.root / "platform-images" / f"healthz-{key}.tar"
    if archive.exists():
        return reference, archive
    binary = standard_library_program(paths, "healthz", HEALTHZ_GO)
    layer = binary_layer("healthz", binary.read_bytes())
    archive.parent.mkdir(parents=True, exist_ok=True)
    archive.write_bytes(docker_archive(reference, layer, ("/usr/local/bin/healthz",)))
    return reference, archive
