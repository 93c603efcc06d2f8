package bench

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxSize is the largest message size a benchmark accepts (64 MiB).
const MaxSize = 64 << 20

// ParseSizes parses a comma-separated list of message sizes. An item is a size or a
// range in qperf's notation:
//
//	14        14 bytes
//	64K, 1M   binary multiples (K = 1024, M = 1024*1024); k and m work too
//	1:64K:*2  1, 2, 4, ... 64K (start:end:step, step "*N" multiplies, "+N" adds)
//	1K:4K:+1K 1K, 2K, 3K, 4K
//	1:64K     the same as 1:64K:*2
//
// Every size lies in 1..MaxSize. Repeated sizes are kept once, at their first position.
func ParseSizes(s string) ([]int, error) {
	var sizes []int
	seen := make(map[int]bool)
	add := func(n int) {
		if !seen[n] {
			seen[n] = true
			sizes = append(sizes, n)
		}
	}
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			return nil, fmt.Errorf("size list %q: empty item", s)
		}
		parts := strings.Split(item, ":")
		if len(parts) == 1 {
			n, err := parseSize(item)
			if err != nil {
				return nil, err
			}
			add(n)
			continue
		}
		if len(parts) > 3 {
			return nil, fmt.Errorf("size range %q: want start:end[:*N|+N]", item)
		}
		start, err := parseSize(parts[0])
		if err != nil {
			return nil, err
		}
		end, err := parseSize(parts[1])
		if err != nil {
			return nil, err
		}
		if end < start {
			return nil, fmt.Errorf("size range %q: end is below start", item)
		}
		step := "*2"
		if len(parts) == 3 {
			step = parts[2]
		}
		if len(step) < 2 || (step[0] != '*' && step[0] != '+') {
			return nil, fmt.Errorf("size range %q: step %q must be *N or +N", item, step)
		}
		by, err := parseSize(step[1:])
		if err != nil {
			return nil, fmt.Errorf("size range %q: step: %w", item, err)
		}
		if step[0] == '*' && by < 2 {
			return nil, fmt.Errorf("size range %q: multiplier must be at least 2", item)
		}
		for n := start; n <= end; {
			add(n)
			if step[0] == '*' {
				n *= by
			} else {
				n += by
			}
		}
	}
	return sizes, nil
}

// parseSize parses one size: decimal digits with an optional K or M suffix.
func parseSize(s string) (int, error) {
	mult := 1
	digits := s
	if s != "" {
		switch s[len(s)-1] {
		case 'K', 'k':
			mult, digits = 1<<10, s[:len(s)-1]
		case 'M', 'm':
			mult, digits = 1<<20, s[:len(s)-1]
		}
	}
	n, err := strconv.ParseUint(digits, 10, 32)
	if err != nil || digits == "" || digits[0] == '+' {
		return 0, fmt.Errorf("size %q: want a number with an optional K or M suffix", s)
	}
	if n == 0 || n*uint64(mult) > MaxSize {
		return 0, fmt.Errorf("size %q: must be between 1 and %s", s, FormatSize(MaxSize))
	}
	return int(n) * mult, nil
}

// FormatSize writes n the way ParseSizes reads it: "14", "1K", "64K", "64000", "1M".
func FormatSize(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.Itoa(n>>20) + "M"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.Itoa(n>>10) + "K"
	}
	return strconv.Itoa(n)
}

// FormatSizes joins sizes with commas, each as FormatSize writes it.
func FormatSizes(sizes []int) string {
	parts := make([]string, len(sizes))
	for i, n := range sizes {
		parts[i] = FormatSize(n)
	}
	return strings.Join(parts, ",")
}
