// Offline check of a CRD in crds/ with the API server's own code (k8s.io/apiextensions-apiserver v0.34.12, the
// cluster's version): the CRD is valid (structural schema, list-map keys), and sample objects are accepted or refused
// as their names say (`*.accepted.yaml`, `*.refused.yaml`), with the schema, the list-set/list-map uniqueness checks and
// the CEL rules (x-kubernetes-validations; those comparing with oldSelf only apply to updates and are skipped) the API
// server runs on create.
// Run: cd tools/crdcheck && go run . ../../crds/nodedevices.yaml testdata/nodedevices.*.yaml
//      (and ../../crds/reservations.yaml testdata/reservation.*.yaml)
package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	apiext "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
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

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func main() {
	if len(os.Args) < 2 {
		fmt.Println("usage: crdcheck CRD.yaml [SAMPLE.accepted.yaml|SAMPLE.refused.yaml ...]")
		os.Exit(2)
	}
	var v1 apiextv1.CustomResourceDefinition
	if err := yaml.Unmarshal(must(os.ReadFile(os.Args[1])), &v1); err != nil {
		panic(err)
	}
	apiextv1.SetObjectDefaults_CustomResourceDefinition(&v1)
	var crd apiext.CustomResourceDefinition
	if err := apiextv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(&v1, &crd, nil); err != nil {
		panic(err)
	}
	errs := validation.ValidateCustomResourceDefinition(context.Background(), &crd)
	check(len(errs) == 0, "CRD %s is valid %v", crd.Name, errs)
	// One schema for every version is hoisted to spec.validation by the conversion.
	var schema *apiext.JSONSchemaProps
	if crd.Spec.Validation != nil {
		schema = crd.Spec.Validation.OpenAPIV3Schema
	} else {
		schema = crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	}
	structural := must(structuralschema.NewStructural(schema))
	validator, _, err := apiservervalidation.NewSchemaValidator(schema)
	if err != nil {
		panic(err)
	}
	celValidator := cel.NewValidator(structural, true, celconfig.PerCallLimit)
	for _, f := range os.Args[2:] {
		// As the API server decodes a body: whole numbers are int64 (CEL rules see int, not double).
		var obj map[string]interface{}
		if err := utiljson.Unmarshal(must(yaml.YAMLToJSON(must(os.ReadFile(f)))), &obj); err != nil {
			panic(err)
		}
		es := apiservervalidation.ValidateCustomResource(field.NewPath(""), obj, validator)
		es = append(es, listtype.ValidateListSetsAndMaps(field.NewPath(""), structural, obj)...)
		celErrs, _ := celValidator.Validate(context.Background(), field.NewPath(""), structural, obj, nil, celconfig.RuntimeCELCostBudget)
		es = append(es, celErrs...)
		if strings.HasSuffix(f, ".refused.yaml") {
			check(len(es) > 0, "%s is refused: %v", f, es)
		} else {
			check(len(es) == 0, "%s is accepted %v", f, es)
		}
	}
	if failures > 0 {
		fmt.Printf("%d failed\n", failures)
		os.Exit(1)
	}
}
