// Package filter is RocketMQ's SQL92 message selector (MessageSelector.bySql,
// expressionType "SQL92"): a hand-written lexer and recursive-descent parser
// that compile an expression once (Compile) into a tree, and an evaluator
// that matches it against one message's properties without allocating
// (Expr.MatchEncoded on the record's encoded properties, Expr.Match on any
// Properties).
//
// It owns the grammar and the semantics, nothing else: it knows no broker,
// store or wire type; the broker (broker/sql_filter.go) compiles
// subscriptions and hands the store a record-level match.
//
// # Grammar (RocketMQ filter/src/main/java/.../parser/SelectorParser.jj)
//
//	selector   = or
//	or         = and { OR and }
//	and        = equality { AND equality }
//	equality   = comparison { "=" comparison | "<>" comparison | IS NULL | IS NOT NULL }
//	comparison = unary { (">" | ">=" | "<" | "<=") unary
//	                   | [NOT] BETWEEN unary AND unary
//	                   | [NOT] IN "(" string { "," string } ")"
//	                   | [NOT] (CONTAINS | STARTSWITH | ENDSWITH) string }
//	unary      = "+" unary | "-" unary | NOT unary | primary
//	primary    = literal | identifier | "(" or ")"
//	literal    = string | decimal | float | TRUE | FALSE | NULL
//
// Keywords are case-insensitive; identifiers ([A-Za-z_$][A-Za-z0-9_$]*) are
// property names, case-sensitive: user properties and the system ones
// (TAGS, KEYS, UNIQ_KEY, ...), all strings, as RocketMQ's broker decodes
// them. Strings are single-quoted, a quote inside one written twice as in
// SQL; decimals ("0" or [1-9][0-9]*, optional L) are Java ints when they
// fit, else longs; floats (5.5, 5., .5, 5E10) are doubles. Whitespace is " \t\n\r\f"; "--" line and
// "/* */" block comments are skipped. Note that NOT binds tighter than a
// comparison, as in RocketMQ: write NOT (a = 1), not NOT a = 1.
//
// # Semantics (RocketMQ's ComparisonExpression, LogicExpression, UnaryExpression)
//
// Evaluation is three-valued (true, false, null) and a message matches only
// when the result is true. A missing property is null: any comparison with
// it is null, so it never matches, and neither does NOT of it
// (NOT (a = 'x') is false for a message without a). AND and OR follow SQL's
// three-valued tables with left-to-right short-circuit. IS [NOT] NULL tests
// presence.
//
// A property (a string) compared with a number is converted to the
// number's type with Java's rules: Integer.valueOf for an int literal,
// Long.valueOf for a long, Double.valueOf for a double. So a > 5 with
// a='5.5' is an evaluation error (Integer.valueOf refuses it) while
// a > 5.0 matches. An evaluation error (a value that does not convert)
// makes the whole expression not match, as RocketMQ logs and drops it. Two
// properties compared with < <= > >= are both read as doubles; = and <>
// between strings compare the text. A property compared with TRUE/FALSE
// uses Boolean.valueOf ('true' in any case is true, anything else false).
// IN takes string literals only. CONTAINS/STARTSWITH/ENDSWITH (RocketMQ 5)
// are false, never null, for a missing property or an empty search.
//
// Expressions RocketMQ refuses when it parses them are refused by Compile
// with an *Error naming the reason and the column: string, boolean or NULL
// literals in < <= > >=, a NULL literal in = or <>, BETWEEN bounds in the
// wrong order, an IN whose left side is not a property, a float literal
// below Double.MIN_VALUE (so 0.0 itself; write 0), a non-boolean
// selector. Unlike RocketMQ, which stops at the end of the first complete
// expression and ignores what follows ("a > 5 xyz" selects a > 5), Compile
// refuses trailing text. Nesting is capped at MaxDepth.
//
// Known differences: Java's Integer/Long.valueOf also accept non-ASCII
// Unicode digits; here only ASCII digits are numbers.
package filter
