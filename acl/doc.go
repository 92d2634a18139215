// Package acl is StrataMQ's access control, RocketMQ 4.x "plain ACL"
// style: accounts of an access key and a secret key in a plain_acl.yml,
// requests signed by the clients with HMAC-SHA1, permissions per topic
// and consumer group. The official clients (Java's AclClientRPCHook,
// client-go's primitive.Credentials) work unchanged.
//
// It owns: parsing plain_acl.yml (Parse, Load), reloading it when it
// changes (ACL.Run), verifying a request's signature and permissions
// (ACL.CheckBroker, ACL.CheckNamesrv; SignatureOK checks one signature
// against a given secret, for ACL 2.0's users in package acl2), and
// signing requests StrataMQ
// itself sends (Credentials.Sign; HeaderSigner for a typed header, without
// a map, as stratamq bench sends). It imports remoting (commands, codes)
// and the standard library; broker, namesrv and cmd import it. It never
// logs, formats or returns a secret key: secrets are of type Secret,
// which prints as [REDACTED], and denials name the access key only.
//
// # The file
//
//	globalWhiteRemoteAddresses:     # peers that need no signature at all
//	  - 10.10.103.*
//	accounts:
//	  - accessKey: RocketMQ
//	    secretKey: 12345678
//	    whiteRemoteAddress:         # peers that may use this account unsigned
//	    admin: false
//	    defaultTopicPerm: DENY      # topics not listed below
//	    defaultGroupPerm: SUB       # groups not listed below
//	    topicPerms:
//	      - topicA=DENY
//	      - topicB=PUB|SUB
//	    groupPerms:
//	      - groupA=SUB
//
// Permissions are PUB, SUB, PUB|SUB and DENY; a missing or unknown one is
// DENY (an unknown word is logged). Addresses: *, one address, an octet as
// * or a range (192.168.0.*, 192.168.1.1-100), a set of last octets
// (192.168.1.{1,2}), or a comma list of those. Keys are at least 6
// characters.
//
// # The signature
//
// The client adds extFields AccessKey (and SecurityToken when it has one),
// then Signature = Base64(HMAC-SHA1(secretKey, content)), content being
// the values (not the keys) of every extFields entry but Signature, in
// ascending order of the keys, followed by the body bytes. Java leaves
// _UNIQUE_KEY_QUERY out and signs SecurityToken; client-go signs the
// former and leaves out the latter; a request carrying either is checked
// both ways. The comparison is constant-time.
//
// # What is checked (RocketMQ's PlainPermissionManager.validate)
//
//  1. A peer in globalWhiteRemoteAddresses passes.
//  2. Otherwise the request must carry an AccessKey naming an account.
//  3. A peer in that account's whiteRemoteAddress passes.
//  4. Otherwise the Signature must match.
//  5. An admin code (IsBrokerAdminCode) needs admin: true.
//  6. Each resource the request touches needs its permission, from
//     topicPerms/groupPerms or else the defaults: sends need PUB on the
//     topic; pulls, offset commits and queries SUB on the topic and the
//     consumer group; a heartbeat SUB on each consumer group and
//     subscribed topic, and PUB or SUB on each producer group it
//     registers (but the clients' own CLIENT_INNER_PRODUCER: the group's
//     transaction checks go to its producers); a consumer send-back SUB
//     on the group and PUB on the original topic. The broker then checks what the header cannot say
//     (ACL.CheckStored): SUB on the stored message's own topic for a
//     send-back and a view by id, PUB on the half message's topic for
//     END_TRANSACTION. A retry (%RETRY%g) or dead-letter (%DLQ%g) topic
//     is its group's resource (a bare %RETRY% or %DLQ% is a topic). An admin account that lists no topicPerms
//     or groupPerms may use every resource; one that lists some is held
//     to them, as in RocketMQ. A PUB to RMQ_SYS_TRACE_TOPIC skips step 6.
//
// On a name server only the codes that change routes or KV config are
// checked (IsNamesrvAdminCode), and they need an admin account; route
// reads stay open.
//
// A refused request is answered NO_PERMISSION (16) with a remark that
// says what was missing, with the access key, resource and permission.
//
// # Cost
//
// What depends only on the rules, the peer and the access key (the
// white lists, the account lookup) is cached per connection and
// recomputed when the rules are reloaded. Per request: a copy of the
// extFields pairs on the stack, an insertion sort, one HMAC-SHA1 from a
// per-account pool, and the resource lookups (BenchmarkACLVerify).
package acl
