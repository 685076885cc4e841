module policysync.dev/admincheck

go 1.24.0

require github.com/apache/pulsar-client-go v0.19.0

require (
	github.com/golang-jwt/jwt/v5 v5.2.2 // indirect
	github.com/golang/protobuf v1.5.4 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	golang.org/x/oauth2 v0.28.0 // indirect
	google.golang.org/protobuf v1.36.5 // indirect
)
