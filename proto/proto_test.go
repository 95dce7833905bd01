// Package proto_test checks that the committed generated Go code matches
// the .proto sources, so a forgotten `make proto` fails the build.
package proto_test

import (
	"context"
	"testing"

	"github.com/bufbuild/protocompile"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/descriptorpb"

	providerv1 "github.com/osm-vm/osm-vm/proto/provider/v1"
)

func TestGeneratedCodeIsCurrent(t *testing.T) {
	for _, tc := range []struct {
		source    string
		generated protoreflect.FileDescriptor
	}{
		{"provider/v1/provider.proto", providerv1.File_provider_v1_provider_proto},
	} {
		t.Run(tc.source, func(t *testing.T) {
			compiler := protocompile.Compiler{
				Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{ImportPaths: []string{"."}}),
			}
			files, err := compiler.Compile(context.Background(), tc.source)
			if err != nil {
				t.Fatalf("compile %s: %v", tc.source, err)
			}
			want := normalize(protodesc.ToFileDescriptorProto(files[0]))
			got := normalize(protodesc.ToFileDescriptorProto(tc.generated))
			if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
				t.Errorf("generated Go for %s is stale; run `make proto` and commit the result (-source +generated):\n%s", tc.source, diff)
			}
		})
	}
}

// normalize drops what differs between compilers but not between versions
// of the API: source positions and derived JSON names.
func normalize(fd *descriptorpb.FileDescriptorProto) *descriptorpb.FileDescriptorProto {
	fd = proto.Clone(fd).(*descriptorpb.FileDescriptorProto)
	fd.SourceCodeInfo = nil
	var clearJSON func(msgs []*descriptorpb.DescriptorProto)
	clearJSON = func(msgs []*descriptorpb.DescriptorProto) {
		for _, m := range msgs {
			for _, f := range m.Field {
				f.JsonName = nil
			}
			clearJSON(m.NestedType)
		}
	}
	clearJSON(fd.MessageType)
	return fd
}
