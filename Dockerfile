# Build: docker build -t stratamq .
# Run:   docker run -p 9876:9876 -p 10911:10911 -p 5557:5557 -v stratamq-data:/data stratamq
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/stratamq ./cmd/stratamq

FROM gcr.io/distroless/static-debian12
COPY --from=build /out/stratamq /stratamq
ENV STRATAMQ_DATA_DIR=/data
EXPOSE 9876 10911 5557
ENTRYPOINT ["/stratamq"]
CMD ["serve"]
