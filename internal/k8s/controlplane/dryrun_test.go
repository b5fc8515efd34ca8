package controlplane

import (
	"fmt"
	"strings"
	"testing"
)

func TestSplitDocuments(t *testing.T) {
	docs := splitDocuments([]byte(`---
# comment only
---
apiVersion: v1
kind: ConfigMap
metadata: {name: a}
---
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: ConfigMap, metadata: {name: b}}
- {apiVersion: v1, kind: Secret, metadata: {name: c}}
---
{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "d"}, "data": {"big": "1"}}
---
a: [unclosed
`))
	var got []string
	for _, d := range docs {
		if d.err != nil {
			got = append(got, fmt.Sprintf("%d:error", d.index))
			continue
		}
		got = append(got, fmt.Sprintf("%d:%s/%s", d.index, d.obj.GetKind(), d.obj.GetName()))
	}
	want := "1:ConfigMap/a 2:ConfigMap/b 2:Secret/c 3:ConfigMap/d 4:error"
	if strings.Join(got, " ") != want {
		t.Errorf("got  %s\nwant %s", strings.Join(got, " "), want)
	}
}
