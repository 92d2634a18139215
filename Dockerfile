# A static, non-root StrataMQ image.
#
#   docker build -t stratamq .
#   docker run -p 9876:9876 -p 10911:10911 -p 5557:5557 -v stratamq:/data \
#     -e STRATAMQ_ADVERTISE_ADDR=<host address>:10911 stratamq
#
# STRATAMQ_ADVERTISE_ADDR: the name server hands clients the address the
# broker registers. Inside a container the broker only knows its container
# address, which clients outside cannot reach: set it to the address and
# port clients use (the host's, with -p 10911:10911; in Kubernetes the pod's
# or a Service's). Data: /data/store, and the default local bucket beside it
# in /data/store-bucket, both on the volume; point STRATAMQ_BUCKET at S3 or
# MinIO for a bucket that outlives the volume (infra/deploy/).
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /out/stratamq ./cmd/stratamq \
	&& mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/stratamq /stratamq
COPY --from=build --chown=65532:65532 /out/data /data
USER 65532:65532
ENV STRATAMQ_DATA_DIR=/data/store
VOLUME /data
# name server, broker, HA, metrics and health
EXPOSE 9876 10911 10912 5557
ENTRYPOINT ["/stratamq"]
CMD ["serve"]
