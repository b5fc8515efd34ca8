package draalloc

import (
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apiserver/pkg/cel/library"
	dracel "k8s.io/dynamic-resource-allocation/cel"

	"github.com/gpuslice/gpuslice/internal/alloc"
)

// The allocator's selector environment gets the Kubernetes CEL libraries
// that live in Kubernetes (its own carries cel-go's extensions), so a
// selector the stock allocator accepts reads the same here: regex find,
// semver, url, ip, cidr, format and the list functions.
func init() {
	if err := alloc.AddSelectorLibraries(
		library.URLs(),
		library.Regex(),
		library.Lists(),
		library.IP(),
		library.CIDR(),
		library.Format(),
		library.SemverLib(library.SemverVersion(1)),
	); err != nil {
		panic(err)
	}
}

// compileDRA compiles a selector as the stock allocator does (Kubernetes'
// DRA CEL environment, k8s.io/dynamic-resource-allocation/cel): what it
// refuses is refused here with its message, quoting the expression the
// user wrote.
func compileDRA(expr string) error {
	r := dracel.GetCompiler(dracel.Features{EnableConsumableCapacity: true}).CompileCELExpression(expr, dracel.Options{})
	if r.Error != nil {
		return fmt.Errorf("selector %q: %s", expr, r.Error.Detail)
	}
	return nil
}

// asWritten rewrites the allocator's quoting of a rewritten selector
// back to the expression the user wrote.
func asWritten(err error, rewritten, written string) error {
	if err == nil || rewritten == written {
		return err
	}
	msg := strings.ReplaceAll(err.Error(), strconv.Quote(rewritten), strconv.Quote(written))
	return fmt.Errorf("%s", msg)
}
