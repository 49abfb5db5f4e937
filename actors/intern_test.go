package actors

import (
	"fmt"
	"slices"
	"testing"
	"unsafe"
)

// Equal values are shared, not copied per record; a value is never changed by interning; past the
// bound a new value is kept as given.
func TestInternerSharesEqualValuesUpToItsBound(t *testing.T) {
	in := newInterner(2)
	a, b := string([]byte("1.0.0")), string([]byte("1.0.0"))
	if unsafe.StringData(a) == unsafe.StringData(b) {
		t.Fatal("the test's two strings share their bytes already")
	}
	if x, y := in.string(a), in.string(b); x != "1.0.0" || unsafe.StringData(x) != unsafe.StringData(y) {
		t.Errorf("two equal versions were not given one copy")
	}
	p, q := []string{"2025-06-18", "2025-11-25"}, []string{"2025-06-18", "2025-11-25"}
	xp, yp := in.list(p), in.list(q)
	if x := *xp; !slices.Equal(x, p) || xp != yp {
		t.Errorf("two equal protocol lists were not given one copy: %v %v", x, *yp)
	}
	x := *xp
	if &x[0] == &p[0] {
		t.Error("the shared list is the caller's own slice, which the caller may change")
	}
	if got := *in.list([]string{"2025-06-18"}); !slices.Equal(got, []string{"2025-06-18"}) || unsafe.StringData(got[0]) != unsafe.StringData(x[0]) {
		t.Errorf("a list's revisions are not interned: %v", got)
	}
	if in.list(nil) != nil {
		t.Error("no list became one")
	}
	if e, blank := in.list([]string{}), in.list([]string{""}); e == nil || *e == nil || len(*e) != 0 || len(*blank) != 1 {
		t.Errorf("an empty list and a list of one empty revision: %v, %v; want [] and [\"\"]", e, blank)
	}
	for i := range 5 {
		v := fmt.Sprintf("9.%d", i)
		if got := in.string(v); got != v {
			t.Fatalf("interning %q gave %q", v, got)
		}
	}
	if len(in.strings) > 2 {
		t.Errorf("%d strings interned, more than the bound of 2", len(in.strings))
	}
}
