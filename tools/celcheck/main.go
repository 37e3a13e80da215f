// Offline check of deploy/admission/*.yaml with the API server's own CEL compiler and validator (k8s.io/apiserver
// v0.34.12, the cluster's version): every expression compiles, and the policies decide sample requests as intended.
// Run: cd tools/celcheck && go run . ../../deploy/admission/policies.yaml ../../deploy/admission/webhook.yaml \
//   ../../deploy/dra/policies.yaml ../../deploy/dra/agent/policies.yaml
package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
	"sigs.k8s.io/yaml"
)

var failures int

func check(cond bool, format string, a ...any) {
	if !cond {
		failures++
		fmt.Printf("FAIL: "+format+"\n", a...)
	} else {
		fmt.Printf("ok:   "+format+"\n", a...)
	}
}

func compiler() *cel.CompositedCompiler {
	env, err := cel.NewCompositionEnv(cel.VariablesTypeName, environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion(), true))
	if err != nil {
		panic(err)
	}
	return cel.NewCompositedCompilerFromTemplate(env)
}

func compilePolicy(p *admissionv1.ValidatingAdmissionPolicy) validating.Validator {
	opts := cel.OptionalVariableDeclarations{HasAuthorizer: true, StrictCost: true}
	msgOpts := cel.OptionalVariableDeclarations{HasAuthorizer: false, StrictCost: true}
	c := compiler()
	vars := make([]cel.NamedExpressionAccessor, len(p.Spec.Variables))
	for i, v := range p.Spec.Variables {
		vars[i] = &validating.Variable{Name: v.Name, Expression: v.Expression}
		r := c.CompileAndStoreVariable(vars[i], opts, environment.StoredExpressions)
		check(r.Error == nil, "%s variable %s compiles %v", p.Name, v.Name, r.Error)
	}
	var matcher matchconditions.Matcher
	if len(p.Spec.MatchConditions) > 0 {
		acc := make([]cel.ExpressionAccessor, len(p.Spec.MatchConditions))
		for i := range p.Spec.MatchConditions {
			acc[i] = (*matchconditions.MatchCondition)(&p.Spec.MatchConditions[i])
		}
		matcher = matchconditions.NewMatcher(c.CompileCondition(acc, opts, environment.StoredExpressions), p.Spec.FailurePolicy, "policy", "validate", p.Name)
	}
	vals := make([]cel.ExpressionAccessor, len(p.Spec.Validations))
	msgs := make([]cel.ExpressionAccessor, len(p.Spec.Validations))
	for i, v := range p.Spec.Validations {
		vals[i] = &validating.ValidationCondition{Expression: v.Expression, Message: v.Message, Reason: v.Reason}
		if v.MessageExpression != "" {
			msgs[i] = &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression}
		}
	}
	return validating.NewValidator(c.CompileCondition(vals, opts, environment.StoredExpressions), matcher, c.CompileCondition(nil, opts, environment.StoredExpressions), c.CompileCondition(msgs, msgOpts, environment.StoredExpressions), p.Spec.FailurePolicy)
}

type decision struct {
	denied  bool
	errored bool
	msg     string
}

func run(v validating.Validator, gvr schema.GroupVersionResource, kind string, op admission.Operation, obj, old runtime.Object, ns string, u user.Info) decision {
	return runSub(v, gvr, "", kind, op, obj, old, ns, u)
}

// runSub is run for a subresource (e.g. pods/ephemeralcontainers).
func runSub(v validating.Validator, gvr schema.GroupVersionResource, sub, kind string, op admission.Operation, obj, old runtime.Object, ns string, u user.Info) decision {
	return runBudget(v, gvr, sub, kind, op, obj, old, ns, u, 1000000000)
}

// runBudget is runSub under a runtime cost budget (the API server's: celconfig.RuntimeCELCostBudget per binding).
func runBudget(v validating.Validator, gvr schema.GroupVersionResource, sub, kind string, op admission.Operation, obj, old runtime.Object, ns string, u user.Info, budget int64) decision {
	attr := admission.NewAttributesRecord(obj, old, schema.GroupVersionKind{Group: gvr.Group, Version: gvr.Version, Kind: kind}, ns, "x", gvr, sub, op, nil, false, u)
	va := &admission.VersionedAttributes{Attributes: attr, VersionedKind: attr.GetKind(), VersionedObject: obj, VersionedOldObject: old}
	var nsObj *corev1.Namespace
	if ns != "" {
		nsObj = &corev1.Namespace{}
		nsObj.Name = ns
	}
	res := v.Validate(context.Background(), gvr, va, nil, nsObj, budget, nil)
	d := decision{}
	for _, x := range res.Decisions {
		if x.Action == validating.ActionDeny {
			d.denied = true
			d.msg += x.Message + " | "
			if x.Evaluation == validating.EvalError {
				d.errored = true
			}
		}
	}
	return d
}

func obj(y string) *unstructured.Unstructured {
	m := map[string]any{}
	if err := yaml.Unmarshal([]byte(y), &m); err != nil {
		panic(err)
	}
	return &unstructured.Unstructured{Object: m}
}

func main() {
	policies := map[string]*admissionv1.ValidatingAdmissionPolicy{}
	bindings := map[string]*admissionv1.ValidatingAdmissionPolicyBinding{}
	var webhook *admissionv1.MutatingWebhookConfiguration
	for _, f := range os.Args[1:] {
		b, err := os.ReadFile(f)
		if err != nil {
			panic(err)
		}
		d := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(string(b)), 4096)
		for {
			var raw map[string]any
			if err := d.Decode(&raw); err != nil {
				break
			}
			j, _ := yaml.Marshal(raw)
			switch raw["kind"] {
			case "ValidatingAdmissionPolicy":
				p := &admissionv1.ValidatingAdmissionPolicy{}
				if err := yaml.UnmarshalStrict(j, p); err != nil {
					panic(err)
				}
				policies[p.Name] = p
			case "ValidatingAdmissionPolicyBinding":
				b := &admissionv1.ValidatingAdmissionPolicyBinding{}
				if err := yaml.UnmarshalStrict(j, b); err != nil {
					panic(err)
				}
				bindings[b.Name] = b
			case "MutatingWebhookConfiguration":
				webhook = &admissionv1.MutatingWebhookConfiguration{}
				if err := yaml.UnmarshalStrict(j, webhook); err != nil {
					panic(err)
				}
			}
		}
	}
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	nd := schema.GroupVersionResource{Group: "bettercompute.io", Version: "v1alpha1", Resource: "nodedevices"}
	tenant := &user.DefaultInfo{Name: "alice", Groups: []string{"system:authenticated"}}

	sp := policies["bettercompute-scheduler-only"]
	check(sp != nil, "policy bettercompute-scheduler-only present")
	v := compilePolicy(sp)
	pod := func(extra string) *unstructured.Unstructured {
		return obj(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"team-a"},"spec":{` + extra + `}}`)
	}
	gpu := `"containers":[{"name":"c","image":"i","resources":{"limits":{"bettercompute.io/gpu":"1"}}}]`
	rsv := `"containers":[{"name":"c","image":"i","resources":{"requests":{"reservations.bettercompute.io/rsv-01k2aaaaaaaaaaaaaaaaaaaaaa":"1"}}}]`
	initGpu := `"containers":[{"name":"c","image":"i"}],"initContainers":[{"name":"i","image":"i","resources":{"limits":{"bettercompute.io/gpu.mig":"1"}}}]`
	for _, c := range []struct {
		name, spec string
		deny       bool
		msg        string
	}{
		{"gpu pod with nodeName", gpu + `,"schedulerName":"better-compute-scheduler","nodeName":"n1"`, true, "sets spec.nodeName (n1)"},
		{"gpu pod with default-scheduler", gpu + `,"schedulerName":"default-scheduler"`, true, "names scheduler default-scheduler"},
		{"gpu pod with volcano", gpu + `,"schedulerName":"volcano"`, true, "Remove spec.schedulerName"},
		{"reservation pod with other scheduler", rsv + `,"schedulerName":"volcano"`, true, "names scheduler volcano"},
		{"init-container gpu with nodeName", initGpu + `,"schedulerName":"better-compute-scheduler","nodeName":"n1"`, true, "spec.nodeName"},
		{"gpu pod on our scheduler", gpu + `,"schedulerName":"better-compute-scheduler"`, false, ""},
		{"plain pod with nodeName and default scheduler", `"containers":[{"name":"c","image":"i","resources":{"limits":{"cpu":"1"}}}],"nodeName":"n1","schedulerName":"default-scheduler"`, false, ""},
		{"pod without resources", `"containers":[{"name":"c","image":"i"}]`, false, ""},
	} {
		d := run(v, pods, "Pod", admission.Create, pod(c.spec), nil, "team-a", tenant)
		check(d.denied == c.deny && !d.errored && strings.Contains(d.msg, c.msg), "scheduler-only: %s → denied=%v %q", c.name, d.denied, d.msg)
	}

	np := policies["bettercompute-nodedevices-own-node"]
	check(np != nil, "policy bettercompute-nodedevices-own-node present")
	v = compilePolicy(np)
	agent := func(node string) user.Info {
		u := &user.DefaultInfo{Name: "system:serviceaccount:better-compute-system:better-compute-agent", Groups: []string{"system:serviceaccounts"}}
		if node != "" {
			u.Extra = map[string][]string{"authentication.kubernetes.io/node-name": {node}}
		}
		return u
	}
	ndObj := func(name string) *unstructured.Unstructured {
		return obj(`{"apiVersion":"bettercompute.io/v1alpha1","kind":"NodeDevices","metadata":{"name":"` + name + `"},"spec":{}}`)
	}
	for _, c := range []struct {
		name   string
		op     admission.Operation
		u      user.Info
		target string
		deny   bool
		msg    string
	}{
		{"agent A creates A", admission.Create, agent("node-a"), "node-a", false, ""},
		{"agent A creates B", admission.Create, agent("node-a"), "node-b", true, "may write only NodeDevices node-a, not node-b"},
		{"agent A updates B", admission.Update, agent("node-a"), "node-b", true, "not node-b"},
		{"agent A updates A", admission.Update, agent("node-a"), "node-a", false, ""},
		{"agent A deletes B", admission.Delete, agent("node-a"), "node-b", true, "not node-b"},
		{"agent A deletes A", admission.Delete, agent("node-a"), "node-a", false, ""},
		{"agent without node extra", admission.Create, agent(""), "node-a", true, "names no node"},
		{"an admin writes B", admission.Create, &user.DefaultInfo{Name: "admin", Groups: []string{"system:masters"}}, "node-b", false, ""},
		{"another service account writes B", admission.Create, &user.DefaultInfo{Name: "system:serviceaccount:x:better-compute-agent", Extra: map[string][]string{"authentication.kubernetes.io/node-name": {"node-a"}}}, "node-b", false, ""},
	} {
		var o, old runtime.Object
		switch c.op {
		case admission.Create:
			o = ndObj(c.target)
		case admission.Update:
			o, old = ndObj(c.target), ndObj(c.target)
		case admission.Delete:
			old = ndObj(c.target)
		}
		d := run(v, nd, "NodeDevices", c.op, o, old, "", c.u)
		check(d.denied == c.deny && !d.errored && strings.Contains(d.msg, c.msg), "nodedevices: %s → denied=%v %q", c.name, d.denied, d.msg)
	}

	vp := policies["bettercompute-no-visible-devices-env"]
	check(vp != nil, "policy bettercompute-no-visible-devices-env present")
	v = compilePolicy(vp)
	envPod := func(envs string) string {
		return `"containers":[{"name":"main","image":"i","env":[` + envs + `]}]`
	}
	for _, c := range []struct {
		name, spec string
		deny       bool
		msg        string
	}{
		{"NVIDIA_VISIBLE_DEVICES=all", envPod(`{"name":"NVIDIA_VISIBLE_DEVICES","value":"all"}`), true, "sets NVIDIA_VISIBLE_DEVICES in container main: GPUs are handed only"},
		{"a GPU UUID among other variables", envPod(`{"name":"A","value":"1"},{"name":"NVIDIA_VISIBLE_DEVICES","value":"GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77"}`), true, "in container main"},
		{"from a ConfigMap (valueFrom)", envPod(`{"name":"NVIDIA_VISIBLE_DEVICES","valueFrom":{"configMapKeyRef":{"name":"cm","key":"k"}}}`), true, "in container main"},
		{"in an init container", `"containers":[{"name":"main","image":"i"}],"initContainers":[{"name":"setup","image":"i","env":[{"name":"NVIDIA_VISIBLE_DEVICES","value":"0"}]}]`, true, "in container setup"},
		{"in two containers", `"containers":[{"name":"main","image":"i","env":[{"name":"NVIDIA_VISIBLE_DEVICES","value":"all"}]},{"name":"side","image":"i","env":[{"name":"NVIDIA_VISIBLE_DEVICES","value":"all"}]}]`, true, "in container main, side"},
		{"void", envPod(`{"name":"NVIDIA_VISIBLE_DEVICES","value":"void"}`), false, ""},
		{"none", envPod(`{"name":"NVIDIA_VISIBLE_DEVICES","value":"none"}`), false, ""},
		{"empty", envPod(`{"name":"NVIDIA_VISIBLE_DEVICES"}`), false, ""},
		{"only NVIDIA_DRIVER_CAPABILITIES", envPod(`{"name":"NVIDIA_DRIVER_CAPABILITIES","value":"all"}`), false, ""},
		{"no env at all", `"containers":[{"name":"main","image":"i"}]`, false, ""},
	} {
		d := run(v, pods, "Pod", admission.Create, pod(c.spec), nil, "team-a", tenant)
		check(d.denied == c.deny && !d.errored && strings.Contains(d.msg, c.msg), "visible-devices: %s → denied=%v %q", c.name, d.denied, d.msg)
	}
	// kubectl debug: an ephemeral container added to a running pod (the subresource's UPDATE carries the whole pod).
	running := `"containers":[{"name":"main","image":"i"}],"ephemeralContainers":[{"name":"debugger","image":"i","env":[{"name":"NVIDIA_VISIBLE_DEVICES","value":"all"}]}]`
	d := runSub(v, pods, "ephemeralcontainers", "Pod", admission.Update, pod(running), pod(`"containers":[{"name":"main","image":"i"}]`), "team-a", tenant)
	check(d.denied && !d.errored && strings.Contains(d.msg, "in container debugger"), "visible-devices: ephemeral container setting it → denied=%v %q", d.denied, d.msg)
	d = runSub(v, pods, "ephemeralcontainers", "Pod", admission.Update, pod(`"containers":[{"name":"main","image":"i"}],"ephemeralContainers":[{"name":"debugger","image":"i"}]`), pod(`"containers":[{"name":"main","image":"i"}]`), "team-a", tenant)
	check(!d.denied && !d.errored, "visible-devices: ephemeral container without it → denied=%v %q", d.denied, d.msg)
	// A pod admitted before the policy keeps its containers: adding a debug container judges the ephemeral ones only.
	before := `"containers":[{"name":"main","image":"i","env":[{"name":"NVIDIA_VISIBLE_DEVICES","value":"all"}]}]`
	d = runSub(v, pods, "ephemeralcontainers", "Pod", admission.Update, pod(before+`,"ephemeralContainers":[{"name":"debugger","image":"i"}]`), pod(before), "team-a", tenant)
	check(!d.denied && !d.errored, "visible-devices: ephemeral container added to an older pod that sets it → denied=%v %q", d.denied, d.msg)

	// envFrom: a ConfigMap or Secret that admission cannot read may set NVIDIA_VISIBLE_DEVICES unless its prefix rules
	// that out (prefix + key can be NVIDIA_VISIBLE_DEVICES only if the name starts with the prefix).
	envFromPod := func(refs string) string {
		return `"containers":[{"name":"main","image":"i","envFrom":[` + refs + `]}]`
	}
	const cm, secret = `"configMapRef":{"name":"cm"}`, `"secretRef":{"name":"s"}`
	const envFromMsg = "takes variables from a ConfigMap or Secret (envFrom) without a safe prefix in container main: admission cannot read them"
	for _, c := range []struct {
		name, spec string
		deny       bool
		msg        string
	}{
		{"envFrom a ConfigMap without a prefix", envFromPod(`{` + cm + `}`), true, envFromMsg},
		{"envFrom a Secret without a prefix", envFromPod(`{` + secret + `}`), true, envFromMsg},
		{"envFrom a ConfigMap with an empty prefix", envFromPod(`{"prefix":"",` + cm + `}`), true, envFromMsg},
		{"envFrom a ConfigMap with prefix APP_", envFromPod(`{"prefix":"APP_",` + cm + `}`), false, ""},
		{"envFrom a Secret with prefix APP_", envFromPod(`{"prefix":"APP_",` + secret + `}`), false, ""},
		{"envFrom a ConfigMap with prefix NVIDIA_", envFromPod(`{"prefix":"NVIDIA_",` + cm + `}`), true, envFromMsg},
		{"envFrom a Secret with prefix NVIDIA_", envFromPod(`{"prefix":"NVIDIA_",` + secret + `}`), true, envFromMsg},
		{"envFrom with prefix NVIDIA_VISIBLE_DEVICES", envFromPod(`{"prefix":"NVIDIA_VISIBLE_DEVICES",` + cm + `}`), true, envFromMsg},
		{"envFrom with prefix NVIDIA_DRIVER_", envFromPod(`{"prefix":"NVIDIA_DRIVER_",` + cm + `}`), false, ""},
		{"envFrom one with prefix APP_, one without", envFromPod(`{"prefix":"APP_",` + cm + `},{` + secret + `}`), true, envFromMsg},
		{"envFrom without a prefix in an init container", `"containers":[{"name":"main","image":"i"}],"initContainers":[{"name":"setup","image":"i","envFrom":[{` + cm + `}]}]`, true, "without a safe prefix in container setup"},
		{"envFrom without a prefix in a container that requests bettercompute.io/gpu", `"containers":[{"name":"main","image":"i","envFrom":[{` + cm + `}],"resources":{"limits":{"bettercompute.io/gpu":"1"}}}]`, true, envFromMsg},
		{"envFrom without a prefix in two containers", `"containers":[{"name":"main","image":"i","envFrom":[{` + cm + `}]},{"name":"side","image":"i","envFrom":[{` + secret + `}]}]`, true, "without a safe prefix in container main, side"},
		{"envFrom message says how to fix it", envFromPod(`{` + cm + `}`), true, "Give each envFrom a prefix that NVIDIA_VISIBLE_DEVICES does not start with (e.g. APP_), or list the variables in env instead; a namespace of NVIDIA components (the GPU operator) may be labelled bettercompute.io/allow-visible-devices=true"},
	} {
		d := run(v, pods, "Pod", admission.Create, pod(c.spec), nil, "team-a", tenant)
		check(d.denied == c.deny && !d.errored && strings.Contains(d.msg, c.msg), "visible-devices: %s → denied=%v %q", c.name, d.denied, d.msg)
	}
	plain := pod(`"containers":[{"name":"main","image":"i"}]`)
	d = runSub(v, pods, "ephemeralcontainers", "Pod", admission.Update, pod(`"containers":[{"name":"main","image":"i"}],"ephemeralContainers":[{"name":"debugger","image":"i","envFrom":[{`+secret+`}]}]`), plain, "team-a", tenant)
	check(d.denied && !d.errored && strings.Contains(d.msg, "without a safe prefix in container debugger"), "visible-devices: ephemeral container with envFrom without a prefix → denied=%v %q", d.denied, d.msg)
	d = runSub(v, pods, "ephemeralcontainers", "Pod", admission.Update, pod(`"containers":[{"name":"main","image":"i"}],"ephemeralContainers":[{"name":"debugger","image":"i","envFrom":[{"prefix":"APP_",`+secret+`}]}]`), plain, "team-a", tenant)
	check(!d.denied && !d.errored, "visible-devices: ephemeral container with envFrom prefix APP_ → denied=%v %q", d.denied, d.msg)

	// Legacy CUDA images: CUDA_VERSION without NVIDIA_REQUIRE_CUDA and with NVIDIA_VISIBLE_DEVICES unset gets every GPU
	// from the NVIDIA container toolkit.
	const cudaMsg = "sets CUDA_VERSION without NVIDIA_REQUIRE_CUDA in container main"
	cuda := `{"name":"CUDA_VERSION","value":"12.4.1"}`
	withRes := func(envs, res string) string {
		return `"containers":[{"name":"main","image":"i","env":[` + envs + `],"resources":` + res + `}]`
	}
	for _, c := range []struct {
		name, spec string
		deny       bool
		msg        string
	}{
		{"CUDA_VERSION alone", envPod(cuda), true, cudaMsg + " (in env, or by an envFrom prefix that CUDA_VERSION starts with): the NVIDIA container toolkit takes it for a legacy CUDA image"},
		{"CUDA_VERSION alone, the fix in the message", envPod(cuda), true, "Set NVIDIA_REQUIRE_CUDA (e.g. cuda>=12.0) or NVIDIA_VISIBLE_DEVICES=void in its env, remove CUDA_VERSION, or request bettercompute.io/gpu"},
		{"CUDA_VERSION from valueFrom", envPod(`{"name":"CUDA_VERSION","valueFrom":{"configMapKeyRef":{"name":"cm","key":"v"}}}`), true, cudaMsg},
		{"CUDA_VERSION with NVIDIA_REQUIRE_CUDA", envPod(cuda + `,{"name":"NVIDIA_REQUIRE_CUDA","value":"cuda>=12.4"}`), false, ""},
		{"CUDA_VERSION with NVIDIA_REQUIRE_CUDA empty", envPod(cuda + `,{"name":"NVIDIA_REQUIRE_CUDA"}`), true, cudaMsg},
		{"CUDA_VERSION with NVIDIA_REQUIRE_CUDA set, then emptied", envPod(cuda + `,{"name":"NVIDIA_REQUIRE_CUDA","value":"cuda>=12.4"},{"name":"NVIDIA_REQUIRE_CUDA","value":""}`), true, cudaMsg},
		{"CUDA_VERSION with NVIDIA_REQUIRE_CUDA from valueFrom", envPod(cuda + `,{"name":"NVIDIA_REQUIRE_CUDA","valueFrom":{"configMapKeyRef":{"name":"cm","key":"r"}}}`), true, cudaMsg},
		{"CUDA_VERSION with NVIDIA_VISIBLE_DEVICES=void", envPod(cuda + `,{"name":"NVIDIA_VISIBLE_DEVICES","value":"void"}`), false, ""},
		{"CUDA_VERSION with NVIDIA_VISIBLE_DEVICES=none", envPod(cuda + `,{"name":"NVIDIA_VISIBLE_DEVICES","value":"none"}`), false, ""},
		{"CUDA_VERSION empty", envPod(`{"name":"CUDA_VERSION","value":""}`), false, ""},
		{"CUDA_VERSION in a container that requests bettercompute.io/gpu", withRes(cuda, `{"limits":{"bettercompute.io/gpu":"1"}}`), false, ""},
		{"CUDA_VERSION in a container that requests its Reservation's resource", withRes(cuda, `{"requests":{"reservations.bettercompute.io/rsv-01k2aaaaaaaaaaaaaaaaaaaaaa":"1"}}`), false, ""},
		{"CUDA_VERSION in a container that requests nvidia.com/gpu", withRes(cuda, `{"limits":{"nvidia.com/gpu":"1"}}`), true, cudaMsg},
		{"CUDA_VERSION in one container, bettercompute.io/gpu in another", `"containers":[{"name":"main","image":"i","env":[` + cuda + `]},{"name":"gpu","image":"i","resources":{"limits":{"bettercompute.io/gpu":"1"}}}]`, true, cudaMsg + " (in env"},
		{"CUDA_VERSION in an init container", `"containers":[{"name":"main","image":"i"}],"initContainers":[{"name":"setup","image":"i","env":[` + cuda + `]}]`, true, "without NVIDIA_REQUIRE_CUDA in container setup"},
		{"envFrom with prefix CUDA_", envFromPod(`{"prefix":"CUDA_",` + cm + `}`), true, cudaMsg},
		{"envFrom with prefix CUDA_ and NVIDIA_REQUIRE_CUDA in env", `"containers":[{"name":"main","image":"i","envFrom":[{"prefix":"CUDA_",` + cm + `}],"env":[{"name":"NVIDIA_REQUIRE_CUDA","value":"cuda>=12.4"}]}]`, false, ""},
		{"only NVIDIA_REQUIRE_CUDA", envPod(`{"name":"NVIDIA_REQUIRE_CUDA","value":"cuda>=12.4"}`), false, ""},
	} {
		d := run(v, pods, "Pod", admission.Create, pod(c.spec), nil, "team-a", tenant)
		check(d.denied == c.deny && !d.errored && strings.Contains(d.msg, c.msg), "visible-devices: %s → denied=%v %q", c.name, d.denied, d.msg)
	}
	d = runSub(v, pods, "ephemeralcontainers", "Pod", admission.Update, pod(`"containers":[{"name":"main","image":"i"}],"ephemeralContainers":[{"name":"debugger","image":"i","env":[`+cuda+`]}]`), plain, "team-a", tenant)
	check(d.denied && !d.errored && strings.Contains(d.msg, "without NVIDIA_REQUIRE_CUDA in container debugger"), "visible-devices: ephemeral container with CUDA_VERSION alone → denied=%v %q", d.denied, d.msg)
	d = runSub(v, pods, "ephemeralcontainers", "Pod", admission.Update, pod(`"containers":[{"name":"main","image":"i"}],"ephemeralContainers":[{"name":"debugger","image":"i","env":[`+cuda+`,{"name":"NVIDIA_VISIBLE_DEVICES","value":"void"}]}]`), plain, "team-a", tenant)
	check(!d.denied && !d.errored, "visible-devices: ephemeral container with CUDA_VERSION and NVIDIA_VISIBLE_DEVICES=void → denied=%v %q", d.denied, d.msg)

	// Cost: a pod larger than etcd stores (1.5 MiB, as protobuf; this JSON is larger still), every container on the
	// policy's longest path (CUDA_VERSION, NVIDIA_REQUIRE_CUDA last, 50 prefixed envFrom), is judged within the API
	// server's limits (PerCallLimit per expression and variable, set in the environment; RuntimeCELCostBudget per
	// binding): decided, not errored.
	{
		var b strings.Builder
		envs, froms := 0, 0
		container := func(name string) {
			envs, froms = envs+2+1200, froms+50 // CUDA_VERSION, NVIDIA_REQUIRE_CUDA, 1200 more
			b.WriteString(`{"name":"` + name + `","image":"i","envFrom":[`)
			for j := 0; j < 50; j++ {
				if j > 0 {
					b.WriteString(",")
				}
				fmt.Fprintf(&b, `{"prefix":"APP%d_","configMapRef":{"name":"cm%d"}}`, j, j)
			}
			b.WriteString(`],"env":[{"name":"CUDA_VERSION","value":"12.4"}`)
			for j := 0; j < 1200; j++ {
				fmt.Fprintf(&b, `,{"name":"V%d"}`, j)
			}
			b.WriteString(`,{"name":"NVIDIA_REQUIRE_CUDA","value":"cuda>=12.4"}],"resources":{"limits":{"cpu":"1"}}}`)
		}
		b.WriteString(`"containers":[`)
		for i := 0; i < 40; i++ {
			if i > 0 {
				b.WriteString(",")
			}
			container(fmt.Sprintf("c%d", i))
		}
		b.WriteString(`],"initContainers":[`)
		for i := 0; i < 40; i++ {
			if i > 0 {
				b.WriteString(",")
			}
			container(fmt.Sprintf("i%d", i))
		}
		b.WriteString(`]`)
		d := runBudget(v, pods, "", "Pod", admission.Create, pod(b.String()), nil, "team-a", tenant, celconfig.RuntimeCELCostBudget)
		check(!d.denied && !d.errored && b.Len() > 1536*1024, "visible-devices: a pod larger than etcd stores (%d KiB of JSON: 80 containers, %d env and %d envFrom entries) within the API server's cost limits → denied=%v %q",
			b.Len()/1024, envs, froms, d.denied, d.msg)
	}

	// The exemptions are the binding's namespaceSelector (the API server applies it before the CEL runs).
	vb := bindings["bettercompute-no-visible-devices-env"]
	check(vb != nil && vb.Spec.PolicyName == vp.Name && vb.Spec.MatchResources != nil && vb.Spec.MatchResources.NamespaceSelector != nil, "binding bettercompute-no-visible-devices-env with a namespaceSelector")
	if vb != nil && vb.Spec.MatchResources != nil && vb.Spec.MatchResources.NamespaceSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(vb.Spec.MatchResources.NamespaceSelector)
		check(err == nil, "visible-devices binding: namespaceSelector parses %v", err)
		for _, c := range []struct {
			name   string
			labels map[string]string
			bound  bool
		}{
			{"a tenant namespace", map[string]string{"kubernetes.io/metadata.name": "team-a"}, true},
			{"a tenant namespace labelled allow-visible-devices=false", map[string]string{"kubernetes.io/metadata.name": "team-a", "bettercompute.io/allow-visible-devices": "false"}, true},
			{"better-compute-system", map[string]string{"kubernetes.io/metadata.name": "better-compute-system"}, false},
			{"gpu-operator labelled allow-visible-devices=true", map[string]string{"kubernetes.io/metadata.name": "gpu-operator", "bettercompute.io/allow-visible-devices": "true"}, false},
		} {
			check(err == nil && sel.Matches(labels.Set(c.labels)) == c.bound, "visible-devices binding: %s → bound=%v", c.name, c.bound)
		}
	}

	cp := policies["bettercompute-controller-pod-annotation-only"]
	check(cp != nil, "policy bettercompute-controller-pod-annotation-only present")
	v = compilePolicy(cp)
	controller := &user.DefaultInfo{Name: "system:serviceaccount:better-compute-system:better-compute-controller", Groups: []string{"system:serviceaccounts"}}
	meta := func(annotations, labels, image string) *unstructured.Unstructured {
		return obj(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"team-a","labels":{` + labels + `},"annotations":{` + annotations + `}},"spec":{"containers":[{"name":"c","image":"` + image + `"}]}}`)
	}
	base := meta(`"a":"1"`, `"app":"x"`, "train:1")
	for _, c := range []struct {
		name  string
		after *unstructured.Unstructured
		u     user.Info
		deny  bool
		msg   string
	}{
		{"sets preempt-at", meta(`"a":"1","bettercompute.io/preempt-at":"2026-12-02T10:00:00Z"`, `"app":"x"`, "train:1"), controller, false, ""},
		{"changes the image", meta(`"a":"1"`, `"app":"x"`, "evil:1"), controller, true, "nothing else of the spec"},
		{"changes a label", meta(`"a":"1"`, `"app":"y"`, "train:1"), controller, true, "not its labels"},
		{"changes another annotation", meta(`"a":"2"`, `"app":"x"`, "train:1"), controller, true, "not its other annotations"},
		{"removes another annotation", meta(``, `"app":"x"`, "train:1"), controller, true, "not its other annotations"},
		{"another user changes the image", meta(`"a":"1"`, `"app":"x"`, "evil:1"), tenant, false, ""},
	} {
		d := run(v, pods, "Pod", admission.Update, c.after, base, "team-a", c.u)
		check(d.denied == c.deny && !d.errored && strings.Contains(d.msg, c.msg), "controller-pod: %s → denied=%v %q", c.name, d.denied, d.msg)
	}
	// The scheduling gate bettercompute.io/allocation (ADR 0049): the controller may remove it, and nothing else.
	gated := func(gates, image, extra string) *unstructured.Unstructured {
		g := ""
		if gates != "" {
			g = `,"schedulingGates":[` + gates + `]`
		}
		return obj(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"team-a","annotations":{"a":"1"}},"spec":{"containers":[{"name":"c","image":"` + image + `"}]` + g + extra + `}}`)
	}
	const ourGate, otherGate = `{"name":"bettercompute.io/allocation"}`, `{"name":"example.com/quota"}`
	for _, c := range []struct {
		name          string
		before, after *unstructured.Unstructured
		deny          bool
	}{
		{"lifts our only gate", gated(ourGate, "train:1", ""), gated("", "train:1", ""), false},
		{"lifts our gate, keeps another", gated(otherGate+","+ourGate, "train:1", ""), gated(otherGate, "train:1", ""), false},
		{"lifts another's gate", gated(otherGate+","+ourGate, "train:1", ""), gated(ourGate, "train:1", ""), true},
		{"lifts every gate", gated(otherGate+","+ourGate, "train:1", ""), gated("", "train:1", ""), true},
		{"lifts our gate and changes the image", gated(ourGate, "train:1", ""), gated("", "evil:1", ""), true},
		{"lifts our gate and adds a nodeSelector", gated(ourGate, "train:1", ""), gated("", "train:1", `,"nodeSelector":{"n":"1"}`), true},
		{"adds a nodeSelector while gated", gated(ourGate, "train:1", ""), gated(ourGate, "train:1", `,"nodeSelector":{"n":"1"}`), true},
		{"drops a field while lifting", gated(ourGate, "train:1", `,"activeDeadlineSeconds":60`), gated("", "train:1", ""), true},
	} {
		d := run(v, pods, "Pod", admission.Update, c.after, c.before, "team-a", controller)
		check(d.denied == c.deny && !d.errored, "controller-pod gate: %s → denied=%v %q", c.name, d.denied, d.msg)
	}

	// deploy/dra/policies.yaml (when given): only the controller writes an allocation of our driver's devices; the
	// scheduler's and kube-controller-manager's reservedFor updates leave it as it was and pass.
	if dp := policies["bettercompute-dra-allocation-controller-only"]; dp != nil {
		v = compilePolicy(dp)
		claims := schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "resourceclaims"}
		const ours = `{"devices":{"results":[{"request":"gpu","driver":"gpu.bettercompute.io","pool":"n1","device":"gpu-0"}]},"nodeSelector":{"nodeSelectorTerms":[{"matchFields":[{"key":"metadata.name","operator":"In","values":["n1"]}]}]}}`
		const oursOther = `{"devices":{"results":[{"request":"gpu","driver":"gpu.bettercompute.io","pool":"n1","device":"gpu-1"}]},"nodeSelector":{"nodeSelectorTerms":[{"matchFields":[{"key":"metadata.name","operator":"In","values":["n1"]}]}]}}`
		const mixed = `{"devices":{"results":[{"request":"a","driver":"gpu.example.com","pool":"n1","device":"d0"},{"request":"b","driver":"gpu.bettercompute.io","pool":"n1","device":"gpu-0"}]}}`
		const foreign = `{"devices":{"results":[{"request":"gpu","driver":"gpu.example.com","pool":"n1","device":"d0"}]}}`
		claim := func(status string) *unstructured.Unstructured {
			return obj(`{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim","metadata":{"name":"x","namespace":"team-a"},"spec":{"devices":{"requests":[{"name":"gpu","exactly":{"deviceClassName":"gpu.bettercompute.io","count":1}}]}}` + status + `}`)
		}
		alloc := func(a string) string { return `,"status":{"allocation":` + a + `}` }
		reserved := func(a string) string {
			return `,"status":{"allocation":` + a + `,"reservedFor":[{"resource":"pods","name":"p","uid":"u1"}]}`
		}
		scheduler := &user.DefaultInfo{Name: "system:kube-scheduler", Groups: []string{"system:authenticated"}}
		kcm := &user.DefaultInfo{Name: "system:serviceaccount:kube-system:resource-claim-controller", Groups: []string{"system:serviceaccounts"}}
		admin := &user.DefaultInfo{Name: "kubernetes-admin", Groups: []string{"system:masters"}}
		otherController := &user.DefaultInfo{Name: "system:serviceaccount:team-a:better-compute-controller", Groups: []string{"system:serviceaccounts"}}
		for _, c := range []struct {
			name     string
			old, new string
			u        user.Info
			deny     bool
			msg      string
		}{
			{"the controller allocates our devices", "", alloc(ours), controller, false, ""},
			{"the controller clears its allocation", alloc(ours), "", controller, false, ""},
			{"kube-scheduler adds reservedFor, allocation unchanged", alloc(ours), reserved(ours), scheduler, false, ""},
			{"kube-controller-manager removes reservedFor, allocation unchanged", reserved(ours), alloc(ours), kcm, false, ""},
			{"kube-scheduler allocates our devices itself", "", reserved(ours), scheduler, true, "system:kube-scheduler may not write this allocation"},
			{"an admin forges an allocation of ours", "", alloc(ours), admin, true, "only the better-compute controller allocates devices of driver gpu.bettercompute.io"},
			{"an admin swaps the device of an allocation of ours", alloc(ours), alloc(oursOther), admin, true, "kubernetes-admin may not"},
			{"a mixed allocation with one device of ours", "", alloc(mixed), scheduler, true, "may not write this allocation"},
			{"a ServiceAccount of the same name in another namespace", "", alloc(ours), otherController, true, "may not write"},
			{"kube-scheduler allocates another driver's devices", "", alloc(foreign), scheduler, false, ""},
			{"a status write with no allocation at all", "", `,"status":{}`, scheduler, false, ""},
		} {
			d := run(v, claims, "ResourceClaim", admission.Update, claim(c.new), claim(c.old), "team-a", c.u)
			d2 := runSub(v, claims, "status", "ResourceClaim", admission.Update, claim(c.new), claim(c.old), "team-a", c.u)
			check(d2.denied == c.deny && d.denied == d2.denied && !d2.errored && strings.Contains(d2.msg, c.msg), "dra-allocation: %s → denied=%v %q", c.name, d2.denied, d2.msg)
		}
	}

	// deploy/dra/agent/policies.yaml (when given): the agent writes only its own node's ResourceSlices of our driver.
	if sp := policies["bettercompute-dra-slices-own-node"]; sp != nil {
		v = compilePolicy(sp)
		slices := schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "resourceslices"}
		slice := func(node, driver, pool string) *unstructured.Unstructured {
			where := `"nodeName":"` + node + `"`
			if node == "" {
				where = `"allNodes":true`
			}
			return obj(`{"apiVersion":"resource.k8s.io/v1","kind":"ResourceSlice","metadata":{"name":"` + node + `-` + driver + `-0"},"spec":{"driver":"` + driver + `",` + where + `,"pool":{"name":"` + pool + `","generation":1,"resourceSliceCount":1},"devices":[{"name":"gpu-0"}]}}`)
		}
		const ours = "gpu.bettercompute.io"
		kubelet := &user.DefaultInfo{Name: "system:node:node-b", Groups: []string{"system:nodes", "system:authenticated"}}
		admin := &user.DefaultInfo{Name: "kubernetes-admin", Groups: []string{"system:masters"}}
		otherNs := &user.DefaultInfo{Name: "system:serviceaccount:x:better-compute-agent", Extra: map[string][]string{"authentication.kubernetes.io/node-name": {"node-a"}}}
		for _, c := range []struct {
			name     string
			op       admission.Operation
			u        user.Info
			new, old *unstructured.Unstructured
			deny     bool
			msg      string
		}{
			{"agent A creates its own node's slice", admission.Create, agent("node-a"), slice("node-a", ours, "node-a"), nil, false, ""},
			{"agent A updates its own node's slice", admission.Update, agent("node-a"), slice("node-a", ours, "node-a"), slice("node-a", ours, "node-a"), false, ""},
			{"agent A deletes its own node's slice", admission.Delete, agent("node-a"), nil, slice("node-a", ours, "node-a"), false, ""},
			{"agent A creates node B's slice", admission.Create, agent("node-a"), slice("node-b", ours, "node-b"), nil, true, "the node agent of node node-a may write only ResourceSlices of node node-a, not of node-b"},
			{"agent A moves its slice to node B", admission.Update, agent("node-a"), slice("node-b", ours, "node-a"), slice("node-a", ours, "node-a"), true, "not of node-b"},
			{"agent A takes node B's slice over", admission.Update, agent("node-a"), slice("node-a", ours, "node-a"), slice("node-b", ours, "node-b"), true, "not of node-b"},
			{"agent A deletes node B's slice", admission.Delete, agent("node-a"), nil, slice("node-b", ours, "node-b"), true, "not of node-b"},
			{"agent A creates a slice of all nodes", admission.Create, agent("node-a"), slice("", ours, "node-a"), nil, true, "not of <none>"},
			{"agent A creates another driver's slice on its node", admission.Create, agent("node-a"), slice("node-a", "gpu.example.com", "node-a"), nil, true, "only ResourceSlices of driver gpu.bettercompute.io, not of gpu.example.com"},
			{"agent A deletes another driver's slice on its node", admission.Delete, agent("node-a"), nil, slice("node-a", "gpu.example.com", "node-a"), true, "not of gpu.example.com"},
			{"agent A turns another driver's slice into ours", admission.Update, agent("node-a"), slice("node-a", ours, "node-a"), slice("node-a", "gpu.example.com", "node-a"), true, "not of gpu.example.com"},
			{"agent A publishes node B's pool on its node", admission.Create, agent("node-a"), slice("node-a", ours, "node-b"), nil, true, "publishes only the pool node-a, not node-b"},
			{"agent without node extra", admission.Create, agent(""), slice("node-a", ours, "node-a"), nil, true, "names no node"},
			{"the kubelet of node B deletes its node's slice", admission.Delete, kubelet, nil, slice("node-b", ours, "node-b"), false, ""},
			{"an admin creates node B's slice", admission.Create, admin, slice("node-b", ours, "node-b"), nil, false, ""},
			{"another namespace's ServiceAccount of that name", admission.Create, otherNs, slice("node-b", ours, "node-b"), nil, false, ""},
		} {
			var o, old runtime.Object
			if c.new != nil {
				o = c.new
			}
			if c.old != nil {
				old = c.old
			}
			d := run(v, slices, "ResourceSlice", c.op, o, old, "", c.u)
			check(d.denied == c.deny && !d.errored && strings.Contains(d.msg, c.msg), "dra-slices: %s → denied=%v %q", c.name, d.denied, d.msg)
		}
	}

	check(webhook != nil && len(webhook.Webhooks) == 2, "two mutating webhooks (pods, dra-pods)")
	claimsOf := func(refs string) string {
		return `"containers":[{"name":"c","image":"i","resources":{"claims":[{"name":"gpu"}]}}],"resourceClaims":[` + refs + `]`
	}
	tmpl := `{"name":"gpu","resourceClaimTemplateName":"t"}`
	named := `{"name":"gpu","resourceClaimName":"c"}`
	for i := 0; webhook != nil && i < len(webhook.Webhooks); i++ {
		w := webhook.Webhooks[i]
		acc := make([]cel.ExpressionAccessor, len(w.MatchConditions))
		for i := range w.MatchConditions {
			acc[i] = (*matchconditions.MatchCondition)(&w.MatchConditions[i])
		}
		c := compiler()
		m := matchconditions.NewMatcher(c.CompileCondition(acc, cel.OptionalVariableDeclarations{HasAuthorizer: true, StrictCost: true}, environment.StoredExpressions), w.FailurePolicy, "webhook", "admit", w.Name)
		for _, x := range []struct {
			name, spec string
			match      bool
		}{
			{"gpu", gpu, i == 0}, {"reservation", rsv, i == 0}, {"init gpu", initGpu, i == 0},
			{"plain", `"containers":[{"name":"c","image":"i","resources":{"limits":{"cpu":"1","nvidia.com/gpu":"1"}}}]`, false},
			{"no resources", `"containers":[{"name":"c","image":"i"}]`, false},
			{"a claim from a template", claimsOf(tmpl), i == 1},
			{"a named claim only", claimsOf(named), false},
			{"a template and a named claim", claimsOf(named + "," + tmpl), i == 1},
			{"a template with nodeName", claimsOf(tmpl) + `,"nodeName":"n1"`, false},
			{"a template and bettercompute.io/gpu", gpu + `,"resourceClaims":[` + tmpl + `]`, i == 0},
		} {
			p := pod(x.spec)
			attr := admission.NewAttributesRecord(p, nil, schema.GroupVersionKind{Version: "v1", Kind: "Pod"}, "team-a", "p", pods, "", admission.Create, nil, false, tenant)
			r := m.Match(context.Background(), &admission.VersionedAttributes{Attributes: attr, VersionedKind: attr.GetKind(), VersionedObject: p}, nil, nil)
			check(r.Error == nil && r.Matches == x.match, "webhook %s matchConditions: %s → matches=%v err=%v", w.Name, x.name, r.Matches, r.Error)
		}
	}
	if failures > 0 {
		fmt.Printf("%d failed\n", failures)
		os.Exit(1)
	}
	fmt.Println("all passed")
}
