// Package quantity parses Kubernetes resource quantities ("10Gi", "500M",
// "1.5Gi", "2e3") exactly as resource.Quantity reads them, without
// depending on Kubernetes: the spec readers and the allocator's CEL
// selectors (quantity(), compareTo()) both need it, and both are pure.
package quantity

import (
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"
)

// Parse parses a Kubernetes resource quantity — "10Gi",
// "500M", "1.5Gi", "2e3", "100m", "+4k" — and returns its value rounded up
// to a whole number, away from zero, as resource.Quantity.Value does.
//
// The grammar is Kubernetes': an optional sign, digits with at most one
// decimal point, then one suffix: binary Ki Mi Gi Ti Pi Ei (powers of
// 1024), decimal n u m k M G T P E (powers of 1000; "k" is lower case),
// or an exponent e<int>/E<int>. There are no spaces and no "B": "5GB" and
// "5G1" are errors, and the error's text suggests the likely value.
func Parse(s string) (int64, error) {
	v, err := ParseBare(s)
	if err != nil {
		return 0, fmt.Errorf("%q: %w%s", s, err, Hint(s))
	}
	return v, nil
}

// ParseBare is Parse without the quoted input and the hint in its error,
// for callers that report both their own way.
func ParseBare(s string) (int64, error) {
	if s == "" {
		return 0, errors.New("empty quantity")
	}
	if len(s) > maxLen {
		return 0, fmt.Errorf("%d characters; at most %d are read", len(s), maxLen)
	}
	i := 0
	if s[0] == '+' || s[0] == '-' {
		i = 1
	}
	digits, dots := 0, 0
	for ; i < len(s); i++ {
		c := s[i]
		if c >= '0' && c <= '9' {
			digits++
		} else if c == '.' && dots == 0 {
			dots++
		} else {
			break
		}
	}
	num, suffix := s[:i], s[i:]
	if digits == 0 {
		return 0, errors.New("does not start with a number")
	}
	factor, ok := suffixFactor(suffix)
	if !ok {
		return 0, fmt.Errorf("unknown suffix %q (want Ki, Mi, Gi, Ti, Pi, Ei, n, u, m, k, M, G, T, P, E or e<exponent>)", suffix)
	}
	if strings.HasSuffix(num, ".") {
		num += "0"
	}
	if strings.HasPrefix(strings.TrimLeft(num, "+-"), ".") {
		num = strings.Replace(num, ".", "0.", 1)
	}
	v, ok := new(big.Rat).SetString(num)
	if !ok {
		return 0, errors.New("not a number")
	}
	v.Mul(v, factor)
	q, m := new(big.Int).QuoRem(v.Num(), v.Denom(), new(big.Int))
	if m.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	} else if m.Sign() < 0 {
		q.Sub(q, big.NewInt(1))
	}
	if !q.IsInt64() {
		return 0, errors.New("too large")
	}
	return q.Int64(), nil
}

// maxLen bounds a quantity's text; maxExponent its e<int>.
const (
	maxLen      = 64
	maxExponent = 30
)

// suffixFactor returns the factor a suffix stands for.
func suffixFactor(suffix string) (*big.Rat, bool) {
	pow := func(base, exp int64) *big.Rat {
		return new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(base), big.NewInt(exp), nil))
	}
	binary := map[string]int64{"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
	decimal := map[string]int64{"": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
	small := map[string]int64{"n": 9, "u": 6, "m": 3}
	if e, ok := binary[suffix]; ok {
		return pow(2, e), true
	}
	if e, ok := decimal[suffix]; ok {
		return pow(10, e), true
	}
	if e, ok := small[suffix]; ok {
		return new(big.Rat).Inv(pow(10, e)), true
	}
	if len(suffix) > 1 && (suffix[0] == 'e' || suffix[0] == 'E') {
		e, err := strconv.Atoi(suffix[1:])
		if err != nil || e < -maxExponent || e > maxExponent {
			return nil, false
		}
		if e < 0 {
			return new(big.Rat).Inv(pow(10, int64(-e))), true
		}
		return pow(10, int64(e)), true
	}
	return nil, false
}

// Hint suggests what a malformed quantity likely meant: an OCR
// "1" or "l" for "i" ("5G1" → "5Gi"), a trailing "B" ("5GB"), an upper-case
// "K". It returns "" when nothing close parses.
func Hint(s string) string {
	var cands []string
	if n := len(s); n >= 2 && strings.ContainsRune("KMGTPE", rune(s[n-2])) && (s[n-1] == '1' || s[n-1] == 'l' || s[n-1] == 'I') {
		cands = append(cands, s[:n-1]+"i")
	}
	if t, ok := strings.CutSuffix(s, "B"); ok {
		if strings.HasSuffix(t, "i") {
			cands = append(cands, t)
		} else {
			cands = append(cands, t+"i", t)
		}
	}
	if t, ok := strings.CutSuffix(s, "K"); ok {
		cands = append(cands, t+"Ki", t+"k")
	}
	var ok []string
	for _, c := range cands {
		if c == s {
			continue
		}
		if _, err := ParseBare(c); err == nil {
			ok = append(ok, strconv.Quote(c))
		}
	}
	if len(ok) == 0 {
		return ""
	}
	return "; did you mean " + strings.Join(ok, " or ") + "?"
}
