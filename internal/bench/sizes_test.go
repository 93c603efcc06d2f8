package bench

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestParseSizes(t *testing.T) {
	tests := []struct {
		in   string
		want []int
	}{
		{"14", []int{14}},
		{"1,14,64K,1M", []int{1, 14, 65536, 1 << 20}},
		{" 1 , 2k,3m ", []int{1, 2048, 3 << 20}},
		{"64000", []int{64000}},
		{"1:64K:*2", []int{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536}},
		{"1:64K", []int{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536}},
		{"128K:1M:*2", []int{131072, 262144, 524288, 1048576}},
		{"1K:4K:+1K", []int{1024, 2048, 3072, 4096}},
		{"10:25:+10", []int{10, 20}},
		{"3:100:*10", []int{3, 30}},
		{"5:5", []int{5}},
		{"14,1K,14,1:2", []int{14, 1024, 1, 2}},
		{"64M", []int{64 << 20}},
	}
	for _, tt := range tests {
		got, err := ParseSizes(tt.in)
		if assert.NoError(t, err, "ParseSizes(%q)", tt.in) {
			assert.Equal(t, tt.want, got, "ParseSizes(%q)", tt.in)
		}
	}
}

func TestParseSizesErrors(t *testing.T) {
	for _, in := range []string{
		"", ",", "1,,2", "0", "-1", "+5", "x", "1.5K", "1G", "65M", "64K:1", "1:2:3:4",
		"1:64K:2", "1:64K:*1", "1:64K:*0", "1:64K:+0", "1:64K:*", "K", "4294967296",
	} {
		got, err := ParseSizes(in)
		assert.Error(t, err, "ParseSizes(%q) = %v", in, got)
	}
}

func TestFormatSize(t *testing.T) {
	tests := []struct {
		n    int
		want string
	}{
		{1, "1"}, {14, "14"}, {1000, "1000"}, {1024, "1K"}, {1536, "1536"}, {65536, "64K"},
		{64000, "64000"}, {1 << 20, "1M"}, {3 << 20, "3M"}, {1<<20 + 1024, "1025K"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, FormatSize(tt.n), "FormatSize(%d)", tt.n)
		back, err := ParseSizes(tt.want)
		assert.NoError(t, err, "ParseSizes(%q)", tt.want)
		assert.Equal(t, []int{tt.n}, back, "ParseSizes(%q)", tt.want)
	}
}
