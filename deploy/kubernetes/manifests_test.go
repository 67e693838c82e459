package kubernetes

import (
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// toolDir is where the image installs roced and the tools (Dockerfile).
const toolDir = "/usr/local/bin/"

// defaultSocket is where goroce programs look for roced without
// $GOROCE_ROCED_SOCKET (internal/core/attach.DefaultSocket).
const defaultSocket = "/run/goroce/roced.sock"

// pod is a pod spec of the manifests: a Pod's, or a workload's template.
type pod struct {
	where string
	meta  metav1.ObjectMeta
	spec  *corev1.PodSpec
}

func podsOf(objs []object) []pod {
	var ps []pod
	for _, o := range objs {
		switch v := o.obj.(type) {
		case *corev1.Pod:
			ps = append(ps, pod{o.where, v.ObjectMeta, &v.Spec})
		case *appsv1.DaemonSet:
			ps = append(ps, pod{o.where, v.Spec.Template.ObjectMeta, &v.Spec.Template.Spec})
		}
	}
	return ps
}

// container is one container of a pod, init containers included.
type container struct {
	pod *pod
	c   *corev1.Container
}

func containersOf(ps []pod) []container {
	var cs []container
	for i := range ps {
		p := &ps[i]
		for _, list := range [][]corev1.Container{p.spec.InitContainers, p.spec.Containers} {
			for j := range list {
				cs = append(cs, container{p, &list[j]})
			}
		}
	}
	return cs
}

// tool is the goroce binary the container runs, "" if it runs something else.
func (c container) tool() string {
	if len(c.c.Command) == 0 || !strings.HasPrefix(c.c.Command[0], toolDir) {
		return ""
	}
	return strings.TrimPrefix(c.c.Command[0], toolDir)
}

func (c container) String() string { return c.pod.where + " container " + c.c.Name }

// flags are a roced container's -name=value args. roced's args must use the
// = form, so a value is never mistaken for a flag.
func (c container) flags(t *testing.T) map[string]string {
	t.Helper()
	f := map[string]string{}
	for _, a := range c.c.Args {
		name, val, ok := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || !ok {
			t.Errorf("%v: arg %q: write roced's flags as -name=value", c, a)
			continue
		}
		f[name] = val
	}
	return f
}

// env is the container's variable name, and whether it sets it.
func (c container) env(name string) (corev1.EnvVar, bool) {
	for _, e := range c.c.Env {
		if e.Name == name {
			return e, true
		}
	}
	return corev1.EnvVar{}, false
}

// hostFile is the node's path of path inside the container, through its
// hostPath mounts; "" when no hostPath volume holds it.
func (c container) hostFile(p string) string {
	best := ""
	var vol string
	for _, m := range c.c.VolumeMounts {
		if (p == m.MountPath || strings.HasPrefix(p, strings.TrimSuffix(m.MountPath, "/")+"/")) && len(m.MountPath) > len(best) {
			best, vol = m.MountPath, m.Name
		}
	}
	for _, v := range c.pod.spec.Volumes {
		if v.Name == vol && v.HostPath != nil && best != "" {
			return path.Join(v.HostPath.Path, strings.TrimPrefix(p, best))
		}
	}
	return ""
}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// TestManifests: the manifests are consistent with each other and with what
// roced serves: namespaces exist, mounts name volumes, $(VAR)s are defined,
// the scrape annotations and probes point at roced's -metrics, and every
// client reaches roced's socket on the node with the permission to attach.
func TestManifests(t *testing.T) {
	objs := loadManifests(t, ".")
	namespaces := map[string]bool{}
	for _, o := range objs {
		if ns, ok := o.obj.(*corev1.Namespace); ok {
			namespaces[ns.Name] = true
		}
	}
	for _, o := range objs {
		m, ok := o.obj.(metav1.Object)
		if !ok {
			t.Fatalf("%s: %T has no object metadata", o.where, o.obj)
		}
		if _, isNS := o.obj.(*corev1.Namespace); !isNS && !namespaces[m.GetNamespace()] {
			t.Errorf("%s: namespace %q is not one the manifests create", o.where, m.GetNamespace())
		}
	}
	pods := podsOf(objs)
	for _, c := range containersOf(pods) {
		checkContainer(t, c)
	}
	var roced []container
	for _, c := range containersOf(pods) {
		if c.tool() == "roced" {
			roced = append(roced, c)
		}
	}
	if len(roced) != 1 {
		t.Fatalf("%d roced containers in the manifests, want 1", len(roced))
	}
	checkRoced(t, objs, roced[0])
	clients := 0
	for _, c := range containersOf(pods) {
		if t := c.tool(); t != "" && t != "roced" {
			clients++
		}
	}
	if clients == 0 {
		t.Error("no example client: no container runs a goroce tool other than roced")
	}
	for _, c := range containersOf(pods) {
		if c.tool() != "" && c.tool() != "roced" {
			checkClient(t, c, roced[0])
		}
	}
}

// checkContainer: mounts name volumes of the pod, every $(VAR) is the
// container's, nothing runs privileged or can gain privileges, and memory is
// bounded.
func checkContainer(t *testing.T, c container) {
	t.Helper()
	vols := map[string]bool{}
	for _, v := range c.pod.spec.Volumes {
		vols[v.Name] = true
	}
	for _, m := range c.c.VolumeMounts {
		if !vols[m.Name] {
			t.Errorf("%v: mounts volume %q, which the pod does not have", c, m.Name)
		}
	}
	for _, s := range append(append([]string{}, c.c.Command...), c.c.Args...) {
		for _, m := range varRef.FindAllStringSubmatch(s, -1) {
			if _, ok := c.env(m[1]); !ok {
				t.Errorf("%v: %q refers to $(%s), which its env does not set (Kubernetes would pass it verbatim)", c, s, m[1])
			}
		}
	}
	sc := c.c.SecurityContext
	switch {
	case sc == nil:
		t.Errorf("%v: no securityContext", c)
	case sc.Privileged != nil && *sc.Privileged:
		t.Errorf("%v: privileged", c)
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Errorf("%v: allowPrivilegeEscalation is not false", c)
	case sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL":
		t.Errorf("%v: capabilities do not drop ALL", c)
	}
	if c.c.Resources.Limits.Memory().IsZero() || c.c.Resources.Requests.Memory().IsZero() {
		t.Errorf("%v: no memory request and limit", c)
	}
}

// checkRoced: the DaemonSet shares the node's network, its selector selects
// its pods, and Prometheus and the kubelet find roced's HTTP endpoint.
func checkRoced(t *testing.T, objs []object, c container) {
	t.Helper()
	var ds *appsv1.DaemonSet
	for _, o := range objs {
		if d, ok := o.obj.(*appsv1.DaemonSet); ok && &d.Spec.Template.Spec == c.pod.spec {
			ds = d
		}
	}
	if ds == nil {
		t.Fatalf("%v: roced does not run in a DaemonSet", c)
	}
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil || !sel.Matches(labels.Set(ds.Spec.Template.Labels)) {
		t.Errorf("%v: selector %v does not select the template's labels %v (%v)", c, ds.Spec.Selector, ds.Spec.Template.Labels, err)
	}
	if !c.pod.spec.HostNetwork {
		t.Errorf("%v: not hostNetwork: roced must own UDP 4791 on the node's address", c)
	}
	f := c.flags(t)
	if f["bind"] != "$(HOST_IP)" {
		t.Errorf("%v: -bind=%q, want the node's address, $(HOST_IP)", c, f["bind"])
	}
	if e, ok := c.env("HOST_IP"); !ok || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "status.hostIP" {
		t.Errorf("%v: HOST_IP is not the downward API's status.hostIP: %+v", c, e)
	}
	_, port, ok := strings.Cut(f["metrics"], ":")
	if !ok {
		t.Fatalf("%v: -metrics=%q has no port", c, f["metrics"])
	}
	var metricsPort int32
	for _, p := range c.c.Ports {
		if p.Name == "metrics" {
			metricsPort = p.ContainerPort
		}
	}
	if strconv.Itoa(int(metricsPort)) != port {
		t.Errorf("%v: the port named metrics is %d, -metrics listens on %s", c, metricsPort, port)
	}
	want := map[string]string{"prometheus.io/scrape": "true", "prometheus.io/port": port, "prometheus.io/path": "/metrics"}
	for k, v := range want {
		if got := c.pod.meta.Annotations[k]; got != v {
			t.Errorf("%v: annotation %s = %q, want %q", c, k, got, v)
		}
	}
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"readinessProbe", c.c.ReadinessProbe, "/readyz"}, {"livenessProbe", c.c.LivenessProbe, "/healthz"}} {
		switch {
		case p.probe == nil || p.probe.HTTPGet == nil:
			t.Errorf("%v: no HTTP %s", c, p.name)
		case p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port.String() != "metrics":
			t.Errorf("%v: %s gets %s on port %s, want %s on port metrics", c, p.name, p.probe.HTTPGet.Path, p.probe.HTTPGet.Port.String(), p.path)
		}
	}
	if c.hostFile(f["socket"]) == "" {
		t.Errorf("%v: -socket=%s is not on a hostPath volume: pods could not reach it", c, f["socket"])
	}
}

// checkClient: the client's socket path ($GOROCE_ROCED_SOCKET, else the
// default) is roced's socket on the node, and the client's groups may write
// it under roced's -socket-mode and -socket-group.
func checkClient(t *testing.T, c, roced container) {
	t.Helper()
	rf := roced.flags(t)
	sock := defaultSocket
	if e, ok := c.env("GOROCE_ROCED_SOCKET"); ok {
		sock = e.Value
	}
	if got, want := c.hostFile(sock), roced.hostFile(rf["socket"]); got == "" || got != want {
		t.Errorf("%v: its socket %s is %q on the node, roced's is %q", c, sock, got, want)
	}
	mode, err := strconv.ParseUint(rf["socket-mode"], 8, 32)
	if err != nil {
		t.Fatalf("%v: -socket-mode=%q: %v", roced, rf["socket-mode"], err)
	}
	if mode&0o002 != 0 {
		return // anyone may attach
	}
	gid, err := strconv.ParseInt(rf["socket-group"], 10, 64)
	if err != nil || mode&0o020 == 0 {
		t.Fatalf("%v: -socket-mode=%s -socket-group=%q: want a numeric group that may write the socket", roced, rf["socket-mode"], rf["socket-group"])
	}
	var groups []int64
	if psc := c.pod.spec.SecurityContext; psc != nil {
		groups = append(groups, psc.SupplementalGroups...)
		if psc.RunAsGroup != nil {
			groups = append(groups, *psc.RunAsGroup)
		}
	}
	if sc := c.c.SecurityContext; sc != nil && sc.RunAsGroup != nil {
		groups = append(groups, *sc.RunAsGroup)
	}
	for _, g := range groups {
		if g == gid {
			return
		}
	}
	t.Errorf("%v: groups %v lack %d, the group of roced's socket: it could not attach", c, groups, gid)
}

// TestManifestsFound: the walk finds the manifests this folder ships, so a
// renamed file cannot leave the tests above checking nothing.
func TestManifestsFound(t *testing.T) {
	got := map[string]int{}
	for _, o := range loadManifests(t, ".") {
		got[fmt.Sprintf("%T", o.obj)]++
	}
	for _, k := range []string{"*v1.Namespace", "*v1.ServiceAccount", "*v1.DaemonSet", "*v1.Pod"} {
		if got[k] == 0 {
			t.Errorf("no %s in the manifests (found %v)", k, got)
		}
	}
}
