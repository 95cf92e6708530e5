package deploy

import (
	"bytes"
	"errors"
	"io"
	"maps"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/silas-gateway/silas/internal/config"
)

// imageUID is the image's user (Dockerfile USER 10001:10001): secret files
// are made readable for it, as docs/deploy.md tells a user to.
const imageUID = 10001

// k8sObject is the part of a Kubernetes object the test reads.
type k8sObject struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Spec struct {
		Replicas *int `yaml:"replicas"`
		Strategy struct {
			Type          string `yaml:"type"`
			RollingUpdate struct {
				MaxUnavailable *int `yaml:"maxUnavailable"`
			} `yaml:"rollingUpdate"`
		} `yaml:"strategy"`
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		// PodDisruptionBudget
		MinAvailable *int `yaml:"minAvailable"`
		Template     struct {
			Metadata struct {
				Labels map[string]string `yaml:"labels"`
			} `yaml:"metadata"`
			Spec podSpec `yaml:"spec"`
		} `yaml:"template"`
		// Service
		Ports []struct {
			Port       int    `yaml:"port"`
			TargetPort string `yaml:"targetPort"`
		} `yaml:"ports"`
	} `yaml:"spec"`
}

type podSpec struct {
	EnableServiceLinks            *bool `yaml:"enableServiceLinks"`
	TerminationGracePeriodSeconds *int  `yaml:"terminationGracePeriodSeconds"`
	HostUsers                     *bool `yaml:"hostUsers"`
	SecurityContext               struct {
		RunAsNonRoot   bool           `yaml:"runAsNonRoot"`
		RunAsUser      int            `yaml:"runAsUser"`
		RunAsGroup     int            `yaml:"runAsGroup"`
		FSGroup        int            `yaml:"fsGroup"`
		SeccompProfile map[string]any `yaml:"seccompProfile"`
	} `yaml:"securityContext"`
	InitContainers []container `yaml:"initContainers"`
	Containers     []container `yaml:"containers"`
	Volumes        []struct {
		Name     string    `yaml:"name"`
		EmptyDir *struct{} `yaml:"emptyDir"`
		PVC      *struct {
			ClaimName string `yaml:"claimName"`
		} `yaml:"persistentVolumeClaim"`
		Secret *struct {
			SecretName  string `yaml:"secretName"`
			DefaultMode int    `yaml:"defaultMode"`
			Optional    bool   `yaml:"optional"`
		} `yaml:"secret"`
		HostPath *struct{ Path, Type string } `yaml:"hostPath"`
	} `yaml:"volumes"`
}

type probe struct {
	HTTPGet struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"`
	} `yaml:"httpGet"`
}

type container struct {
	Name            string   `yaml:"name"`
	Image           string   `yaml:"image"`
	ImagePullPolicy string   `yaml:"imagePullPolicy"`
	Args            []string `yaml:"args"`
	Env             []struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom *struct {
			SecretKeyRef struct{ Name, Key string } `yaml:"secretKeyRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	Ports []struct {
		ContainerPort int    `yaml:"containerPort"`
		Name          string `yaml:"name"`
	} `yaml:"ports"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
	Lifecycle      struct {
		PreStop *struct {
			Sleep *struct {
				Seconds int `yaml:"seconds"`
			} `yaml:"sleep"`
		} `yaml:"preStop"`
	} `yaml:"lifecycle"`
	Resources struct {
		Requests map[string]string `yaml:"requests"`
	} `yaml:"resources"`
	SecurityContext struct {
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
		Privileged               bool  `yaml:"privileged"`
		Capabilities             struct {
			Add  []string `yaml:"add"`
			Drop []string `yaml:"drop"`
		} `yaml:"capabilities"`
		ReadOnlyRootFilesystem bool           `yaml:"readOnlyRootFilesystem"`
		ProcMount              string         `yaml:"procMount"`
		AppArmorProfile        map[string]any `yaml:"appArmorProfile"`
	} `yaml:"securityContext"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		ReadOnly  bool   `yaml:"readOnly"`
	} `yaml:"volumeMounts"`
}

// show prints an optional number of the manifest.
func show(n *int) string {
	if n == nil {
		return "unset"
	}
	return strconv.Itoa(*n)
}

func loadManifest(t *testing.T) map[string]k8sObject {
	t.Helper()
	b, err := os.ReadFile("kubernetes/silas.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs := map[string]k8sObject{}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(false)
	for {
		var o k8sObject
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("kubernetes/silas.yaml: %v", err)
		}
		objs[o.Kind] = o
	}
	return objs
}

// dockerfileEnv is the runtime stage's ENV (KEY=value pairs on ENV lines).
func dockerfileEnv(t *testing.T) map[string]string {
	env := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^ENV (.*)$`).FindAllStringSubmatch(runtimeStage(t), -1) {
		for _, kv := range strings.Fields(m[1]) {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
	}
	return env
}

// TestKubernetesManifest: the manifest's Deployment, Service and volume
// claim fit together and fit the binary: every SILAS_* variable is a
// configuration key Silas accepts, the container port is the one the
// gateway listens on, the probes hit /readyz and /healthz on it, and the
// pod has what the sandbox needs (docs/deploy.md) and nothing more: no
// capability, no privilege escalation, its own user namespace with an
// unmasked /proc, the shipped seccomp profile, the keys from a Secret.
func TestKubernetesManifest(t *testing.T) {
	objs := loadManifest(t)
	dep, svc, pdb := objs["Deployment"], objs["Service"], objs["PodDisruptionBudget"]
	// Several instances (issue 25): two replicas, a rolling update that
	// starts a new pod before stopping an old one, and a disruption budget
	// that keeps one running through a node drain.
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 2 {
		t.Errorf("replicas = %s, want 2", show(dep.Spec.Replicas))
	}
	if st := dep.Spec.Strategy; st.Type != "RollingUpdate" || st.RollingUpdate.MaxUnavailable == nil || *st.RollingUpdate.MaxUnavailable != 0 {
		t.Errorf("strategy = %+v, want RollingUpdate with maxUnavailable 0", st)
	}
	if pdb.Spec.MinAvailable == nil || *pdb.Spec.MinAvailable < 1 || dep.Spec.Replicas != nil && *pdb.Spec.MinAvailable >= *dep.Spec.Replicas {
		t.Errorf("PodDisruptionBudget minAvailable = %v, want at least 1 and fewer than the replicas (else a drain never ends)", show(pdb.Spec.MinAvailable))
	}
	if !maps.Equal(pdb.Spec.Selector.MatchLabels, dep.Spec.Selector.MatchLabels) || len(pdb.Spec.Selector.MatchLabels) == 0 {
		t.Errorf("PodDisruptionBudget selects %v, the Deployment %v", pdb.Spec.Selector.MatchLabels, dep.Spec.Selector.MatchLabels)
	}
	pod := dep.Spec.Template.Spec
	if pod.EnableServiceLinks == nil || *pod.EnableServiceLinks {
		t.Error("enableServiceLinks must be false")
	}
	if pod.HostUsers == nil || *pod.HostUsers {
		t.Error("hostUsers must be false: procMount Unmasked needs the pod's own user namespace")
	}
	sc := pod.SecurityContext
	if !sc.RunAsNonRoot || sc.RunAsUser != imageUID || sc.RunAsGroup != imageUID || sc.FSGroup != imageUID {
		t.Errorf("pod securityContext = %+v, want non-root uid/gid/fsGroup %d (the image's user)", sc, imageUID)
	}
	if sc.SeccompProfile["type"] != "Localhost" || sc.SeccompProfile["localhostProfile"] != "profiles/silas.json" {
		t.Errorf("seccompProfile = %v, want the shipped profile (deploy/seccomp.json) as Localhost profiles/silas.json", sc.SeccompProfile)
	}
	for k, v := range dep.Spec.Selector.MatchLabels {
		if dep.Spec.Template.Metadata.Labels[k] != v {
			t.Errorf("selector %s=%s does not match the pod's labels", k, v)
		}
	}

	volumes := map[string]int{}
	for i, v := range pod.Volumes {
		volumes[v.Name] = i
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("containers = %d, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	for _, ctr := range append([]container{c}, pod.InitContainers...) {
		if ctr.ImagePullPolicy != "IfNotPresent" {
			t.Errorf("%s: imagePullPolicy = %q, want IfNotPresent (a locally built image)", ctr.Name, ctr.ImagePullPolicy)
		}
		s := ctr.SecurityContext
		if s.AllowPrivilegeEscalation == nil || *s.AllowPrivilegeEscalation || s.Privileged || len(s.Capabilities.Add) > 0 ||
			len(s.Capabilities.Drop) != 1 || s.Capabilities.Drop[0] != "ALL" || !s.ReadOnlyRootFilesystem {
			t.Errorf("%s: securityContext = %+v, want no privilege escalation, every capability dropped, a read-only root", ctr.Name, s)
		}
		for _, m := range ctr.VolumeMounts {
			if _, ok := volumes[m.Name]; !ok {
				t.Errorf("%s mounts volume %s, which the pod lacks", ctr.Name, m.Name)
			}
		}
	}
	if c.SecurityContext.ProcMount != "Unmasked" || c.SecurityContext.AppArmorProfile["type"] != "Unconfined" {
		t.Errorf("silas: procMount %q, appArmorProfile %v: the sandbox needs an unmasked /proc and mount (docs/deploy.md)",
			c.SecurityContext.ProcMount, c.SecurityContext.AppArmorProfile)
	}
	if len(c.Args) != 1 || c.Args[0] != "serve" {
		t.Errorf("args = %v, want [serve]", c.Args)
	}
	if c.Resources.Requests["cpu"] == "" || c.Resources.Requests["memory"] == "" {
		t.Errorf("resource requests = %v, want cpu and memory", c.Resources.Requests)
	}

	// The environment is one Silas accepts (config.Load refuses unknown
	// SILAS_* names), on top of the image's own.
	env := dockerfileEnv(t)
	secretRefs := map[string]bool{}
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil {
			secretRefs[e.ValueFrom.SecretKeyRef.Name+"/"+e.ValueFrom.SecretKeyRef.Key] = true
			v = "postgres://role@db.example/silas"
		}
		env[e.Name] = v
	}
	var list []string
	for k, v := range env {
		list = append(list, k+"="+v)
	}
	cfg, err := config.Load("", list)
	if err != nil {
		t.Fatalf("the pod's environment is refused: %v", err)
	}
	for _, want := range []string{"silas-db/url", "silas-db/migrate_url"} {
		if !secretRefs[want] {
			t.Errorf("no env from Secret %s (the gateway's and the migrations' database roles)", want)
		}
	}
	if cfg.Database.URL == "" || cfg.Database.MigrateURL == "" {
		t.Errorf("database.url %q, database.migrate_url %q: both must come from the Secret", cfg.Database.URL, cfg.Database.MigrateURL)
	}

	// Ports: the gateway's listen port is the container's, the probes and
	// the Service use it by name.
	_, portStr, _ := strings.Cut(cfg.HTTP.Listen, ":")
	listenPort, _ := strconv.Atoi(portStr)
	named := map[string]int{}
	for _, p := range c.Ports {
		named[p.Name] = p.ContainerPort
	}
	if named["http"] != listenPort || listenPort == 0 {
		t.Errorf("containerPort http = %d, but the gateway listens on %q", named["http"], cfg.HTTP.Listen)
	}
	if host, _, _ := strings.Cut(cfg.HTTP.Listen, ":"); host == "127.0.0.1" || host == "localhost" {
		t.Errorf("http.listen %q is loopback: the kubelet's probes and the Service cannot reach it", cfg.HTTP.Listen)
	}
	for name, p := range map[string]*probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		want := map[string]string{"readiness": "/readyz", "liveness": "/healthz"}[name]
		if p == nil || p.HTTPGet.Path != want || named[p.HTTPGet.Port] != listenPort {
			t.Errorf("%s probe = %+v, want GET %s on port http", name, p, want)
		}
	}
	if len(svc.Spec.Ports) != 1 || named[svc.Spec.Ports[0].TargetPort] != listenPort {
		t.Errorf("Service ports = %+v, want targetPort http", svc.Spec.Ports)
	}

	// Draining: preStop sleeps while the endpoints update, then SIGTERM
	// gives serve http.shutdown_grace for work in flight; the grace period
	// covers both.
	ps := c.Lifecycle.PreStop
	if ps == nil || ps.Sleep == nil || ps.Sleep.Seconds < 1 {
		t.Errorf("preStop = %+v, want a sleep before SIGTERM", ps)
	} else if g := pod.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second <= time.Duration(ps.Sleep.Seconds)*time.Second+cfg.HTTP.ShutdownGrace.Duration {
		t.Errorf("terminationGracePeriodSeconds = %s, want more than preStop's %d s + http.shutdown_grace %s", show(g), ps.Sleep.Seconds, cfg.HTTP.ShutdownGrace.Duration)
	}

	// data_dir is each pod's own scratch: not a claim several replicas
	// would share (a ReadWriteOnce claim holds one node only).
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m.Name
	}
	if name, ok := mounts[cfg.DataDir]; !ok || pod.Volumes[volumes[name]].EmptyDir == nil {
		t.Errorf("data_dir %s is not an emptyDir volume of the pod", cfg.DataDir)
	}
	if mounts["/tmp"] == "" {
		t.Error("no writable /tmp under a read-only root")
	}
	if v := pod.Volumes[volumes[mounts["/dev/net/tun"]]]; v.HostPath == nil || v.HostPath.Type != "CharDevice" {
		t.Error("no /dev/net/tun (pasta needs it for network-on actions)")
	}
	// The keys come from a Secret mounted read-only, and only into the
	// init container that copies them into data_dir (hidden from the
	// sandbox), never into the gateway's container where /etc or another
	// system directory could show them to a sandboxed program.
	kv := pod.Volumes[volumes["keys"]]
	if kv.Secret == nil || kv.Secret.SecretName != "silas-keys" {
		t.Fatalf("volume keys = %+v, want Secret silas-keys", kv)
	}
	// Replicas share one identity: a pod without the keys would make its own.
	if kv.Secret.Optional {
		t.Error("the keys Secret is optional: every replica must start with the cluster's keys")
	}
	for _, m := range c.VolumeMounts {
		if m.Name == "keys" {
			t.Errorf("the keys Secret is mounted into the gateway's container at %s", m.MountPath)
		}
	}
	found := false
	for _, ic := range pod.InitContainers {
		for _, m := range ic.VolumeMounts {
			if m.Name == "keys" {
				found = true
				if !m.ReadOnly {
					t.Errorf("%s mounts the keys Secret writable", ic.Name)
				}
			}
		}
	}
	if !found {
		t.Error("nothing mounts the keys Secret")
	}
}
