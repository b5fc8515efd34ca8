package controlplane

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"
)

// FieldManager is the field manager apitest's writes are made as.
const FieldManager = "gpuslice-apitest"

var getOptions = metav1.GetOptions{}

func createOptions(dryRun bool) metav1.CreateOptions {
	o := metav1.CreateOptions{FieldManager: FieldManager, FieldValidation: metav1.FieldValidationStrict}
	if dryRun {
		o.DryRun = []string{metav1.DryRunAll}
	}
	return o
}

func applyOptions(dryRun bool) metav1.PatchOptions {
	force := true
	o := metav1.PatchOptions{FieldManager: FieldManager, FieldValidation: metav1.FieldValidationStrict, Force: &force}
	if dryRun {
		o.DryRun = []string{metav1.DryRunAll}
	}
	return o
}

// ObjectError is the error DryRun and Apply return for one object.
type ObjectError struct {
	Document   int // 1-based index of the YAML document, counting non-empty ones
	APIVersion string
	Kind       string
	Namespace  string // as written in the document
	Name       string
	Err        error // the API server's error (an apierrors.APIStatus) or a decoding error
}

func (e *ObjectError) Error() string {
	what := e.Kind
	if what == "" {
		what = "object"
	}
	if e.Name != "" {
		what += "/" + e.Name
	}
	if e.Namespace != "" {
		what += " in namespace " + e.Namespace
	}
	return fmt.Sprintf("document %d: %s (%s): %v", e.Document, what, e.APIVersion, e.Err)
}

func (e *ObjectError) Unwrap() error { return e.Err }

// DryRun sends every object in the multi-document YAML to the server as a
// server-side dry-run create (dryRun=All) with strict field validation, so
// unknown or duplicate fields are errors, exactly as `kubectl create
// --dry-run=server --validate=strict` would. An object that already exists
// is checked as a dry-run server-side apply over the live one instead.
// Namespaces the objects live in are created for real first, with a default
// ServiceAccount as a controller manager would add. It returns one
// *ObjectError per object that fails (decoding, unknown kind, or rejection),
// in document order; nil means every object was accepted.
func (s *Server) DryRun(ctx context.Context, yamlData []byte) []error {
	return s.each(ctx, yamlData, true)
}

// Apply server-side applies every object in the multi-document YAML for real
// (forcing conflicts, strict field validation), creating namespaces as
// DryRun does. It returns one *ObjectError per failing object.
func (s *Server) Apply(ctx context.Context, yamlData []byte) []error {
	return s.each(ctx, yamlData, false)
}

// Get reads one object; namespace is ignored for cluster-scoped kinds.
func (s *Server) Get(ctx context.Context, apiVersion, kind, namespace, name string) (*unstructured.Unstructured, error) {
	gvk := schema.FromAPIVersionAndKind(apiVersion, kind)
	ri, _, err := s.resource(ctx, gvk, namespace, false)
	if err != nil {
		return nil, err
	}
	return ri.Get(ctx, name, getOptions)
}

func (s *Server) each(ctx context.Context, yamlData []byte, dryRun bool) []error {
	var errs []error
	for _, d := range splitDocuments(yamlData) {
		err := d.err
		if err == nil {
			err = s.send(ctx, d.obj, dryRun)
		}
		if err == nil {
			continue
		}
		oe := &ObjectError{Document: d.index, Err: err}
		if d.obj != nil {
			oe.APIVersion, oe.Kind = d.obj.GetAPIVersion(), d.obj.GetKind()
			oe.Namespace, oe.Name = d.obj.GetNamespace(), d.obj.GetName()
		}
		errs = append(errs, oe)
	}
	return errs
}

func (s *Server) send(ctx context.Context, obj *unstructured.Unstructured, dryRun bool) error {
	ri, _, err := s.resource(ctx, obj.GroupVersionKind(), obj.GetNamespace(), true)
	if err != nil {
		return err
	}
	if dryRun {
		_, err = ri.Create(ctx, obj, createOptions(true))
		if err == nil || !apierrors.IsAlreadyExists(err) || obj.GetName() == "" {
			return err
		}
		// It exists already: validate it as an update of the live object.
	}
	data, err := obj.MarshalJSON()
	if err != nil {
		return err
	}
	_, err = ri.Patch(ctx, obj.GetName(), types.ApplyPatchType, data, applyOptions(dryRun))
	return err
}

// resource maps gvk to a client, re-reading discovery once if the kind is
// unknown (a CRD installed since), and creates the namespace for namespaced
// kinds when ensureNS is set.
func (s *Server) resource(ctx context.Context, gvk schema.GroupVersionKind, namespace string, ensureNS bool) (dynamic.ResourceInterface, *meta.RESTMapping, error) {
	m, err := s.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil && meta.IsNoMatchError(err) {
		s.mapper.Reset()
		m, err = s.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("the server does not serve %s: %w", gvk, err)
	}
	if m.Scope.Name() != meta.RESTScopeNameNamespace {
		return s.Client.Resource(m.Resource), m, nil
	}
	if namespace == "" {
		namespace = metav1.NamespaceDefault
	}
	if ensureNS {
		if err := s.ensureNamespace(ctx, namespace); err != nil {
			return nil, nil, err
		}
	}
	return s.Client.Resource(m.Resource).Namespace(namespace), m, nil
}

var (
	namespaceGVR      = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	serviceAccountGVR = schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}
)

// ensureNamespace creates the namespace and its default ServiceAccount (no
// controller manager runs to add it, and pods need it to pass admission).
func (s *Server) ensureNamespace(ctx context.Context, ns string) error {
	s.nsMu.Lock()
	defer s.nsMu.Unlock()
	if s.namespaces[ns] {
		return nil
	}
	for _, o := range []struct {
		gvr schema.GroupVersionResource
		obj *unstructured.Unstructured
	}{
		{namespaceGVR, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns},
		}}},
		{serviceAccountGVR, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "ServiceAccount", "metadata": map[string]any{"name": "default", "namespace": ns},
		}}},
	} {
		ri := dynamic.ResourceInterface(s.Client.Resource(o.gvr))
		if o.gvr == serviceAccountGVR {
			ri = s.Client.Resource(o.gvr).Namespace(ns)
		}
		if _, err := ri.Create(ctx, o.obj, createOptions(false)); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %s %q: %w", o.obj.GetKind(), o.obj.GetName(), err)
		}
	}
	s.namespaces[ns] = true
	return nil
}

// document is one decoded YAML document.
type document struct {
	index int
	obj   *unstructured.Unstructured
	err   error
}

// splitDocuments splits multi-document YAML (or JSON) into objects, in
// order. Empty documents are skipped and not counted; a List's items become
// separate objects sharing the List's index.
func splitDocuments(data []byte) []document {
	var docs []document
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	index := 0
	for {
		raw, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			return append(docs, document{index: index + 1, err: fmt.Errorf("reading YAML: %w", err)})
		}
		j, err := yaml.YAMLToJSON(raw)
		if err != nil {
			index++
			docs = append(docs, document{index: index, err: fmt.Errorf("parsing YAML: %w", err)})
			continue
		}
		j = bytes.TrimSpace(j)
		if len(j) == 0 || bytes.Equal(j, []byte("null")) {
			continue // only comments or whitespace
		}
		index++
		var m map[string]any
		if err := utiljson.Unmarshal(j, &m); err != nil {
			docs = append(docs, document{index: index, err: fmt.Errorf("document is not an object: %w", err)})
			continue
		}
		obj := &unstructured.Unstructured{Object: m}
		if obj.GetAPIVersion() == "" || obj.GetKind() == "" {
			docs = append(docs, document{index: index, obj: obj, err: errors.New("apiVersion and kind are required")})
			continue
		}
		if obj.IsList() {
			err := obj.EachListItem(func(o runtime.Object) error {
				docs = append(docs, document{index: index, obj: o.(*unstructured.Unstructured)})
				return nil
			})
			if err != nil {
				docs = append(docs, document{index: index, err: fmt.Errorf("%s items: %w", obj.GetKind(), err)})
			}
			continue
		}
		docs = append(docs, document{index: index, obj: obj})
	}
}
