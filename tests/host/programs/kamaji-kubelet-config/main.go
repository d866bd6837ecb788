// kamaji-kubelet-config prints the KubeletConfiguration that Kamaji stores in a tenant's
// kube-system/kubelet-config ConfigMap, from the same libraries at the versions Kamaji's go.mod
// resolves (k8s.io/kubernetes v1.36.3, k8s.io/kubelet v0.36.1, k8s.io/apimachinery v0.36.3,
// github.com/evanphx/json-patch/v5 v5.9.11).
//
// It follows getKubeletConfigmapContent and the codec helpers it calls, read in clastix/kamaji
// at ddbabd87ed0e8d7c319414383e153c46f21733a9 (internal/kubeadm/uploadconfig.go:75-109,
// internal/utilities/utilities.go:48-115); the line each step models is named below. Nothing
// of Kamaji's is linked: its module is not on the module proxy.
//
// Input (stdin, JSON): {"cgroupDriver", "clusterDNS", "clusterDomain", "patches"}, what
// UploadKubeletConfig passes from the TenantControlPlane (uploadconfig.go:38-42) and the
// TCP's spec.kubernetes.kubelet.configurationJSONPatches (none: omit or null). Output
// (stdout): the ConfigMap's `kubelet` value. An error exits 1 with Kamaji's wording on stderr.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"

	jsonpatchv5 "github.com/evanphx/json-patch/v5"
	"k8s.io/apimachinery/pkg/runtime"
	serializer "k8s.io/apimachinery/pkg/runtime/serializer/json"
	kubelettypes "k8s.io/kubelet/config/v1beta1"
	kubeletv1beta1 "k8s.io/kubernetes/pkg/kubelet/apis/config/v1beta1"
)

type request struct {
	CgroupDriver  string          `json:"cgroupDriver"`
	ClusterDNS    []string        `json:"clusterDNS"`
	ClusterDomain string          `json:"clusterDomain"`
	Patches       json.RawMessage `json:"patches"`
}

// codec is utilities.go's serializer: an empty scheme, SimpleMetaFactory, not strict, so a
// decode keeps only the fields the typed struct has (utilities.go:48-115).
func codec(yaml bool) *serializer.Serializer {
	scheme := runtime.NewScheme()
	return serializer.NewSerializerWithOptions(serializer.SimpleMetaFactory{}, scheme, scheme,
		serializer.SerializerOptions{Yaml: yaml, Pretty: false, Strict: false})
}

func encode(o runtime.Object, yaml bool) ([]byte, error) {
	buf := bytes.NewBuffer(nil)
	if err := codec(yaml).Encode(o, buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func content(req request) ([]byte, error) {
	var kc kubelettypes.KubeletConfiguration

	kubeletv1beta1.SetDefaults_KubeletConfiguration(&kc) // uploadconfig.go:78

	kc.APIVersion = kubeletv1beta1.SchemeGroupVersion.String() // :80-90
	kc.Kind = "KubeletConfiguration"
	kc.Authentication.X509.ClientCAFile = "/etc/kubernetes/pki/ca.crt"
	kc.CgroupDriver = req.CgroupDriver
	kc.ClusterDNS = req.ClusterDNS
	kc.ClusterDomain = req.ClusterDomain
	kc.RotateCertificates = true
	kc.StaticPodPath = "/etc/kubernetes/manifests"
	kc.ResolverConfig = nil

	// kubeadm_phases.go:158-165: the TCP's patches, as JSON, through DecodePatch.
	var patch jsonpatchv5.Patch
	if len(req.Patches) > 0 {
		var err error
		if patch, err = jsonpatchv5.DecodePatch(req.Patches); err != nil {
			return nil, fmt.Errorf("cannot decode JSON Patches: %w", err)
		}
	}

	if len(patch) > 0 { // uploadconfig.go:92-106
		document, err := encode(&kc, false)
		if err != nil {
			return nil, fmt.Errorf("unable to encode KubeletConfiguration to JSON for JSON patching: %w", err)
		}
		if document, err = patch.Apply(document); err != nil {
			return nil, fmt.Errorf("unable to apply JSON patching to KubeletConfiguration: %w", err)
		}
		kc = kubelettypes.KubeletConfiguration{}
		if _, _, err = codec(false).Decode(document, nil, &kc); err != nil {
			return nil, fmt.Errorf("unable to decode JSON to KubeletConfiguration: %w", err)
		}
	}

	return encode(&kc, true) // :108
}

func main() {
	input, err := io.ReadAll(os.Stdin)
	if err == nil {
		var req request
		if err = json.Unmarshal(input, &req); err == nil {
			var out []byte
			if out, err = content(req); err == nil {
				_, err = os.Stdout.Write(out)
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
