// Package acl2 is StrataMQ's ACL 2.0, as Apache RocketMQ 5.3 models it
// (RIP-68): users and their access policies, beside the plain_acl.yml
// accounts of package acl (ACL 1.0), which it does not change.
//
// A user has a username (the AccessKey its clients sign with), a password
// (their secret key: requests are signed exactly as for ACL 1.0,
// acl.SignatureOK), a type (Super or Normal) and a status (enable or
// disable). A user's ACL has a Custom and a Default policy, each a list of
// entries: a resource ("*", Type:name, Type:prefix* or Type:* with Type
// Cluster, Namespace, Topic or Group), actions (Pub, Sub, Create, Update,
// Delete, Get, List, All), source addresses (addresses or CIDR blocks;
// none: any) and a decision (Allow or Deny).
//
// A request is decided (Store.Decide) as RocketMQ 5.3 decides it: an
// unknown or disabled user is refused; a super user passes; otherwise the
// entries matching the resource, one of the actions and the source
// address are taken from the Custom policy, or from the Default policy
// when none of the Custom ones matches, and the most specific decides: a
// literal name over a prefix, a longer prefix over a shorter one, a prefix
// over Type:*, and Type:* over *. Between entries as specific, Deny wins.
// No match: refused. A refusal (Denial) names the user, the actions, the
// resource and the source address, never a password.
//
// Requests maps a remoting request to its questions (one per resource it
// touches) as RocketMQ's authorization context builder does. Store holds
// the users and ACLs, changes them as RocketMQ's admin codes
// (AUTH_CREATE_USER 3001 to AUTH_LIST_ACL 3010) ask, and encodes them as a
// section of the broker's bucket checkpoint (Encode, Load). The package
// never logs, and never answers a password (GetUser and ListUsers leave it
// out).
package acl2
