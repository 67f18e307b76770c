package sqlfilter

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/amqpactor/amqpactor/messages"
	"github.com/stretchr/testify/require"
)

// The cases here follow RabbitMQ's own unit suite for its SQL filter
// (amqp_filter_sql_unit_SUITE), group by group, on the messages that suite
// builds.

// symbol stands for a named string type such as amqp.Symbol.
type symbol string

// uuid stands for a named byte array such as amqp.UUID.
type uuid [16]byte

func appProps() map[string]any {
	return map[string]any{
		"country":     symbol("UK"),
		"city":        "London",
		"description": "This is a test message",
		"currency":    symbol("GBP"),
		"product_id":  symbol("ABC_123"),
		"weight":      uint16(5),
		"price":       10.5,
		"quantity":    uint32(100),
		"discount":    0.25,
		"temperature": int32(-5),
		"score":       uint64(0),
		"distance":    float32(1.2e6),
		"tiny_value":  3.5e-4,
		"large_value": 6.02e23,
		"active":      true,
		"premium":     false,
		"missing":     nil,
		"percentage":  uint8(75),
	}
}

func withHeaders(h map[string]any) *messages.Message { return &messages.Message{Headers: h} }

// cases lists expressions that match m and expressions that do not.
type cases struct {
	m       *messages.Message
	yes, no []string
}

func (c cases) run(t *testing.T) {
	t.Helper()
	for _, expr := range c.yes {
		f, err := Parse(expr)
		require.NoError(t, err, expr)
		require.True(t, f.Match(c.m), "want a match: %s", expr)
		require.Equal(t, expr, f.String())
	}
	for _, expr := range c.no {
		f, err := Parse(expr)
		require.NoError(t, err, expr)
		require.False(t, f.Match(c.m), "want no match: %s", expr)
	}
}

func TestLogicalOperators(t *testing.T) {
	cases{m: withHeaders(appProps()),
		yes: []string{
			"country = 'UK' AND weight = 5",
			"'UK' = country AND 5 = weight",
			"country = 'France' OR weight < 6",
			"NOT country = 'France'",
			"absent OR active",
			"active OR absent",
			// A non-boolean operand is UNKNOWN, and UNKNOWN OR TRUE is TRUE.
			"percentage OR active",
			"active OR percentage",
			"NOT (absent IN ('v1', 'v2') AND premium)",        // NOT (UNKNOWN AND FALSE)
			"NOT (active AND premium)",                        // NOT (TRUE AND FALSE)
			"NOT (NOT (absent IN ('v1', 'v2') OR active))",    // NOT NOT (UNKNOWN OR TRUE)
			"country = 'UK' AND (weight > 3 OR price < 20)",   //
			"NOT (country = 'France' OR country = 'Germany')", //
			"(country = 'US' OR country = 'UK') AND (weight > 2 AND weight < 10)",
			"NOT NOT active",
		},
		no: []string{
			"country = 'UK' AND weight > 5",
			"missing AND premium",
			"active AND absent",
			"NOT absent",
			"premium OR absent",
			"NOT (absent IN ('v1', 'v2') AND active)",                    // NOT (UNKNOWN AND TRUE)
			"NOT (absent IN ('v1', 'v2') AND absent LIKE 'v3')",          // NOT (UNKNOWN AND UNKNOWN)
			"NOT (active AND absent IN ('v1', 'v2'))",                    // NOT (TRUE AND UNKNOWN)
			"NOT (absent IN ('v1', 'v2') OR premium)",                    // NOT (UNKNOWN OR FALSE)
			"NOT (absent IN ('v1', 'v2') OR absent LIKE 'v3')",           // NOT (UNKNOWN OR UNKNOWN)
			"NOT (absent IN ('v1', 'v2') OR active)",                     // NOT (UNKNOWN OR TRUE)
			"NOT (premium OR absent IN ('v1', 'v2'))",                    // NOT (FALSE OR UNKNOWN)
			"NOT (NOT (premium OR absent IN ('v1', 'v2')))",              // NOT NOT UNKNOWN
			"country = 'UK' AND NOT active = TRUE",                       //
			"NOT percentage",                                             // NOT of a number is UNKNOWN
			"percentage AND active",                                      //
			"NOT (percentage AND active)",                                //
			"NOT (percentage OR premium)",                                //
			"NOT 'UK'",                                                   //
			"NOT (country = 'UK') AND NOT (percentage OR TRUE) OR FALSE", //
		},
	}.run(t)
}

func TestComparisonOperators(t *testing.T) {
	cases{m: withHeaders(appProps()),
		yes: []string{
			"country = 'UK'",
			"country <> 'US'",
			"country != 'US'",
			"weight > 3",
			"country > 'DE'", // strings order byte by byte, as in RabbitMQ
			"'Zurich' > city",
			"weight < 10",
			"country < 'US'",
			"weight >= 5", "weight >= 4",
			"country >= 'UK'", "country >= 'DE'",
			"weight >= 5.0", "weight >= 4.99",
			"price >= 10.5", "price >= 10.4", "price >= 10",
			"weight <= 5", "weight <= 6",
			"price <= 10.6",
			"country <= 'US'", "country <= 'UK'",
			"active = TRUE", "premium = FALSE",
			// Unlike types are never equal, so <> is TRUE (RabbitMQ compares with Erlang's /=).
			"weight <> '5'", "country != 5", "active <> 1", "NOT weight = '5'",
			"NOT premium >= 0",
		},
		no: []string{
			"country = 'US'",
			"country <> 'UK'", "country != 'UK'",
			"weight > 5", "country > 'US'",
			"weight < 5", "country < 'DE'",
			"weight >= 6", "weight >= 5.01", "price >= 10.51", "price >= 11",
			"weight <= 4", "price <= 10", "country <= 'DE'",
			"premium <> FALSE",
			// Unlike types compare FALSE, and booleans do not order.
			"premium >= 'false'", "premium <= 'false'", "premium >= 0", "premium <= 0",
			"weight = '5'", "weight >= '5'", "weight <= '5'",
			"country <= TRUE", "country >= TRUE",
			"country > 1", "country >= 1", "country < 1", "country <= 1",
			"TRUE > FALSE", "TRUE >= TRUE",
		},
	}.run(t)
}

func TestArithmeticOperators(t *testing.T) {
	cases{m: withHeaders(appProps()),
		yes: []string{
			"weight + 5 = 10", "price + 4.5 = 15",
			"weight - 2 = 3", "price - 0.5 = 10",
			"weight * 2 = 10", "quantity * price * discount = 262.5",
			// / divides as floats, as Erlang's / does.
			"weight / 2 = 2.5", "price / 2 = 5.25", "quantity / 10 = 10", "quantity / 10 = 10.000",
			"7 / 2 = 3.5", "-7 / 2 = -3.5",
			"weight % 2 = 1",
			"quantity % weight = 0.00",
			"score = quantity % quantity",
			"quantity % percentage = 25",
			"24 < quantity % percentage",
			"7 % temperature = 2", // the sign of the dividend, as Erlang's rem
			"-7 % 2 = -1",
			"101 % percentage % weight = 1", // left associative
			"(quantity + 1) % percentage % weight = 1",
			"101 % (percentage % 30) = 11",
			"(weight + 5) * 2 = 20",
			"price / (weight - 3) = 5.25",
			"+temperature = -5", "-temperature = 5",
			"+weight = 5", "-weight = -5",
			"6 + -weight = 1", "6 - +weight = 1", "6 + +weight = 11", "6 - -weight = 11",
			"+(-weight) = -5", "-(+weight) = -5", "-(-weight) = 5", "+(+weight) = 5",
			"10 - 2 - 3 = 5", "24 / 4 / 2 = 3",
		},
		no: []string{
			"+weight",
			"+city", "+city = 'London'", "-absent", "-active = 1",
			"absent + 4 = 5", "2 * absent = 0",
			"quantity % score = 0", // % 0
			"price % 2 = 0.5",      // % of a float is UNKNOWN
			"NOT price % 2 = 0.5",  //
			"weight % 2.0 = 1",
			"country + 'x' = 'UKx'", // no concatenation
		},
	}.run(t)
}

func TestStrings(t *testing.T) {
	one := func(k string, v any) *messages.Message { return withHeaders(map[string]any{k: v}) }
	cases{m: withHeaders(appProps()),
		yes: []string{
			"'UK''s' = 'UK''s'",
			`"UK" = "UK"`, `country = "UK"`, `'UK' = "UK"`, `"UK" = 'UK'`,
			`country = 'UK' AND country = "UK"`, `"" = ''`,
			` """""" = '""' `, `"UK""s" = "UK""s"`,
			`description LIKE "%test%"`, `description LIKE "This is a %"`,
			`country LIKE "U_"`, `country LIKE "UK"`,
			`product_id LIKE "ABC\_%" ESCAPE "\"`,
			`country IN ("US", "UK", "France")`, `country IN ('US', "UK", 'France')`,
			`"London" IN (city, country)`,
			`country NOT LIKE "US"`,
			`country = "UK" AND description LIKE "%test%" AND city = 'London'`,
			`(country IN ("UK", "US") OR city = "London") AND weight > 3`,
			`"🇬🇧" = '🇬🇧'`,
			`description = "This is a test message"`,
			`country < "US"`, `"US" >= country`,
		},
		no: []string{
			"country = '🇬🇧'",
			`country = "US"`, `country LIKE "US"`, `country IN ("US", "France")`,
			`country NOT LIKE "U_"`, `"🇬🇧" != '🇬🇧'`,
		},
	}.run(t)
	for _, c := range []cases{
		{m: one("country", "🇬🇧"), yes: []string{"country = '🇬🇧'", `country = "🇬🇧"`}},
		{m: one("country", "UK's"), yes: []string{"country = 'UK''s'", `country = "UK's"`}},
		{m: one("country", "🇬🇧's"), yes: []string{"country = '🇬🇧''s'"}},
		{m: one("country", `🇬🇧"s`), yes: []string{`country = "🇬🇧""s"`}},
		{m: one("country", ""), yes: []string{"country = ''", `"" = country`, `'' = country`}},
		{m: one("country", "'"), yes: []string{"country = ''''"}},
		{m: one("country", `UK"s`), yes: []string{`country = "UK""s"`, `country = 'UK"s'`}},
		{m: one("country", `"`), yes: []string{`country = """"`}},
		{m: one("country", `""`), yes: []string{`country = """"""`}},
		{m: one("key", `They said "Hello"`), yes: []string{`"They said ""Hello""" = key`, `key = 'They said "Hello"'`}},
		{m: one("key", "It's working"), yes: []string{`key = "It's working"`}},
		{m: one("key", "_foo"), yes: []string{`key LIKE "z_%" ESCAPE "z"`}},
		{m: one("key", "  spaces  "), yes: []string{`key = "  spaces  "`}},
		{m: one("key", "a\nb"), yes: []string{"key = 'a\nb'"}}, // a string may hold control characters
	} {
		c.run(t)
	}
}

func TestBinaryConstants(t *testing.T) {
	m := withHeaders(map[string]any{
		"data":      []byte("Hello"),
		"signature": []byte{0xDE, 0xAD, 0xBE, 0xEF},
		"empty":     []byte{},
		"single":    []byte{255},
		"zeros":     []byte{0, 0, 0},
		"id":        uuid{0x01, 0x23},
		"name":      "Hello",
	})
	cases{m: m,
		yes: []string{
			"0x48656C6C6F = 0x48656C6C6F",
			"data = 0x48656C6C6F", "signature = 0xDEADBEEF", "single = 0xFF", "zeros = 0x000000",
			"signature IN (0xCAFEBABE, 0xDEADBEEF)", "data IN (0x48656C6C6F, 0x576F726C64)", "data IN (data)",
			"signature NOT IN (0xCAFEBABE, 0xFEEDFACE)",
			"0xAB <> 0xAC", "0xAB != 0xAC",
			"data = 0x48656C6C6F AND signature = 0xDEADBEEF",
			"data = 0x576F726C64 OR data = 0x48656C6C6F",
			"missing_binary IS NULL", "data IS NOT NULL", "empty IS NOT NULL",
			"(data = 0x576F726C64 OR data = 0x48656C6C6F) AND signature IN (0xDEADBEEF, 0xCAFEBABE)",
			"signature=0xDEADBEEF", "signature =  0xDEADBEEF",
			"0xBB > 0xAA", "0x010101 > zeros", "0x010101 >= zeros", "0xFE < single", "0xFE <= single",
			// Strings and binaries are one type to RabbitMQ (Erlang binaries).
			"data = 'Hello'", "name = 0x48656C6C6F", "data LIKE 'He%'",
			"id = 0x01230000000000000000000000000000",
		},
		no: []string{
			"0x48656C6C6F = 0x48656C6C6F21",
			"data = 0x48656C6C", "signature = 0xDEADBEEE", "single = 0xFE", "empty = 0x00",
			"signature IN (0xCAFEBABE, 0xFEEDFACE)", "signature NOT IN (0xDEADBEEF, 0xCAFEBABE)",
			"0xAB = 0xAC",
			"data = 0x576F726C64 AND signature = 0xDEADBEEF",
			"data IS NULL",
			"0x01 + 0x02 = 0x03", "signature + 1 = 0xDEADBEF0",
			"0x010101 < zeros", "0x010101 <= zeros",
		},
	}.run(t)
	cases{m: withHeaders(appProps()), no: []string{"weight = 0x05", "active = 0x01"}}.run(t)
}

func TestLike(t *testing.T) {
	one := func(v any) *messages.Message { return withHeaders(map[string]any{"key": v}) }
	cases{m: withHeaders(appProps()),
		yes: []string{
			"description LIKE '%test%'", "description LIKE 'This is a %'", "description LIKE '%a test message'",
			"description LIKE 'T_i% a %e_%e_sa%'",
			"country LIKE 'UK'", "country LIKE 'U_'", "country LIKE '_K'", "country LIKE 'UK%'",
			"country LIKE '%UK'", "country LIKE 'U%K'",
			`product_id LIKE 'ABC\_%' ESCAPE '\'`,
			"product_id LIKE 'ABC🥕_123' ESCAPE '🥕'",
			"country NOT LIKE 'US'", "country NOT LIKE 'U%S'",
			"description LIKE '%test%' AND country = 'UK'",
			"(city LIKE 'Paris') OR (description LIKE '%test%')",
			"city LIKE 'Paris' OR description LIKE '%test%'",
			"(country) LIKE 'U%'", // the subject may be any expression
		},
		no: []string{
			"description LIKE 'T_i% a %e_%e_sa'", "description LIKE 'is a test message'",
			"country LIKE 'US'", "country LIKE '_UK'", "country LIKE 'UK_'", "country LIKE 'U_K'",
			"city LIKE 'New%'",
			`product_id LIKE 'ABC\%' ESCAPE '\'`, `product_id LIKE 'ABC\_\%' ESCAPE '\'`,
			"product_id LIKE 'ABC🥕%123' ESCAPE '🥕'",
			"country NOT LIKE 'U_'", "country NOT LIKE '%U%'", "country NOT LIKE 'U%K'",
			// LIKE on NULL or a number is UNKNOWN, and so is NOT LIKE.
			"absent LIKE '%'", "absent NOT LIKE '%'", "missing LIKE '%'", "missing NOT LIKE '%'",
			"weight LIKE '5'", "weight NOT LIKE '5'", "active LIKE '%'",
		},
	}.run(t)
	for _, c := range []cases{
		{m: one("aa"), yes: []string{"key LIKE 'a%a'"}},
		{m: one("a"), no: []string{"key LIKE 'a%a'"}},
		{m: one(""),
			yes: []string{"key LIKE ''", "key LIKE '%'", "key LIKE '%%'", "key LIKE '%%%'"},
			no:  []string{"key LIKE 'x'", "key LIKE '%x'", "key LIKE '%x%'", "key LIKE '_'"}},
		{m: one("car🥕rot"),
			yes: []string{"key LIKE 'car🥕rot'", "key LIKE 'car_rot'", "key LIKE '___🥕___'", "key LIKE '%🥕%'",
				"key LIKE '%_🥕_%'", "key LIKE '_%🥕%_'"},
			no: []string{"key LIKE 'car__rot'", "key LIKE 'carrot'", "key LIKE 'car🥕to'"}},
		{m: one([]byte{0, 1, 128}), yes: []string{"key NOT LIKE '%a'"}, no: []string{"key LIKE '%a'"}}, // compared as bytes
		// A wildcard pattern on a subject that is not UTF-8 is UNKNOWN, not FALSE.
		{m: one([]byte{255}), no: []string{"key LIKE '_a'", "key NOT LIKE '_a'", "key LIKE '%%'", "key NOT LIKE '%%'"}},
		{m: one([]byte{255}), yes: []string{"key LIKE '%'", "key NOT LIKE 'a%'"}}, // compared as bytes
		{m: one(`##.\|()[]{} ^$*+???`),
			yes: []string{`key LIKE '_#.\|()[]{} ^$*+?%'`, `key LIKE '##.\|()[]{} ^$*+???'`}},
		{m: one("_foo"), yes: []string{"key LIKE 'z_%' ESCAPE 'z'", "key LIKE '$_%' ESCAPE '$'"}},
		{m: one("foo"), no: []string{"key LIKE 'z_%' ESCAPE 'z'", "key LIKE '$_%' ESCAPE '$'"}},
		{m: one("5%"), yes: []string{"key LIKE '_$%' ESCAPE '$'"}},
		{m: one("🥕%"), yes: []string{"key LIKE '_$%' ESCAPE '$'"}},
		{m: one("🍰%🥕"), yes: []string{"key LIKE '🍰@%🥕' ESCAPE '@'"}},
		{m: one("🍰other🥕"), no: []string{"key LIKE '🍰@%🥕' ESCAPE '@'"}},
		{m: one("🍰🥕"), no: []string{"key LIKE '🍰@%🥕' ESCAPE '@'"}},
		{m: one(`_#.\|()[]{} ^$*+?%`), yes: []string{`key LIKE '!_#.\|()[]{} ^$*+?!%' ESCAPE '!'`}},
		{m: one(`##.\|()[]{} ^$*+?%`), no: []string{`key LIKE '!_#.\|()[]{} ^$*+?!%' ESCAPE '!'`}},
		{m: one("a🇬🇧"), yes: []string{"key NOT LIKE 'z_🇬🇧' ESCAPE 'z'"}},
		{m: one("_🇬🇧"), no: []string{"key NOT LIKE 'z_🇬🇧' ESCAPE 'z'"}},
		{m: one("abc"), no: []string{"key LIKE '%%X'"}},
		{m: one("abcX"), yes: []string{"key LIKE '%%X'"}},
		{m: one("xaxbx"), yes: []string{"key LIKE '%%a%%b%%'"}},
		{m: one("xbxax"), no: []string{"key LIKE '%%a%%b%%'"}},
		{m: one("10%"), yes: []string{"key LIKE '10%%' ESCAPE '%'", "key LIKE '1_%%' ESCAPE '%'"}},
		{m: one("100"), no: []string{"key LIKE '10%%' ESCAPE '%'"}},
		{m: one("abcabd"), yes: []string{"key LIKE '%ab_'", "key LIKE 'a%b_'", "key LIKE '%c%b%'"}, no: []string{"key LIKE '%abc'"}},
		{m: one("aXbXc"), yes: []string{"key LIKE 'a%X_%c'", "key LIKE '%X_X%'"}, no: []string{"key LIKE '%X__X%'"}},
		// RabbitMQ's regular expression: % and _ do not match a line feed,
		// $ matches before a final one; a pattern without _ and with at most
		// one % compares bytes and has neither quirk.
		{m: one("a\nb"), yes: []string{"key LIKE 'a%b'", "key LIKE '%b'"}, no: []string{"key LIKE 'a%%b'", "key LIKE 'a_b'"}},
		{m: one("ab\n"), yes: []string{"key LIKE 'a_'", "key LIKE 'a%%'", "key LIKE 'ab%'"}, no: []string{"key LIKE '%b'", "key LIKE 'ab'"}},
	} {
		c.run(t)
	}
}

// TestLikeLinear runs patterns that make a backtracking matcher take time
// exponential or quadratic in the subject; it checks only the answers.
func TestLikeLinear(t *testing.T) {
	long := strings.Repeat("a", 200_000)
	abab := strings.Repeat("ab", 50_000)
	m := withHeaders(map[string]any{"k": long, "kx": long + "X", "abab": abab, "zabab": "z" + abab,
		"cab": strings.Repeat("c", 100_000) + abab})
	manyWild := strings.Repeat("%_", 2000) + "%X"
	cases{m: m,
		yes: []string{
			"kx LIKE '" + manyWild + "'",
			"kx LIKE '" + strings.Repeat("%a", 1000) + "%X'",
			"k LIKE '%" + strings.Repeat("a", 1500) + "%'",
			"k LIKE '%" + strings.Repeat("_a", 1000) + "'",
			"abab LIKE '%" + strings.Repeat("a_", 1500) + "%'",
			"zabab LIKE '%" + strings.Repeat("a_", 1500) + "%'",
			"cab LIKE '%c" + strings.Repeat("a_", 100) + "%'",
			"cab LIKE '_%" + strings.Repeat("b_", 100) + "%b'",
		},
		no: []string{
			"k LIKE '" + manyWild + "'",
			"k LIKE '" + strings.Repeat("%a", 1000) + "%X'",
			"k LIKE '%" + strings.Repeat("a", 1500) + "b%'",
			"k LIKE '%" + strings.Repeat("a_", 1000) + "b%'",
			"abab LIKE '%" + strings.Repeat("a_", 1500) + "b%'",
			"zabab LIKE 'z" + strings.Repeat("_a", 1500) + "%'",
		},
	}.run(t)
}

func TestIn(t *testing.T) {
	gb := withHeaders(map[string]any{"country": "🇬🇧"})
	cases{m: withHeaders(appProps()),
		yes: []string{
			"country IN ('US', 'UK', 'France')", "country IN ('UK')", "'London' IN (city, country)",
			"country NOT IN ('US', 'France', 'Germany')", "country NOT IN ('🇬🇧')",
			"country IN ('UK', 'US') AND weight > 3",
			"city IN ('Berlin', 'Paris') OR country IN ('UK', 'US')",
			"weight IN (5.0)", "weight IN (1, 2 + 3)", "active IN (TRUE)",
			// An item that is NULL is not equal, so IN is FALSE, not UNKNOWN.
			"weight NOT IN (absent)", "weight NOT IN (absent, 6)",
		},
		no: []string{
			"country IN ('US', 'France')", "country NOT IN ('US', 'UK', 'France')",
			"'London' NOT IN (city, country)",
			"missing IN ('UK', 'US')", "absent IN ('UK', 'US')",
			"missing NOT IN ('UK', 'US')", "absent NOT IN ('UK', 'US')",
			"weight IN ('5')", "weight IN (absent)",
		},
	}.run(t)
	cases{m: gb, yes: []string{"country IN ('🇫🇷', '🇬🇧')"}, no: []string{"country NOT IN ('🇫🇷', '🇬🇧')"}}.run(t)
	m := withHeaders(appProps())
	m.Priority, m.GroupSequence = 11, 10
	cases{m: m,
		yes: []string{"price IN (h.priority - 0.5)", "10.0 IN (TRUE, p.group_sequence)", "10.00 IN (FALSE, p.group_sequence)"},
		no:  []string{"price IN (h.priority + 0.5)", "10.0 NOT IN (TRUE, p.group_sequence)"},
	}.run(t)
}

func TestNull(t *testing.T) {
	cases{m: withHeaders(appProps()),
		yes: []string{
			"missing IS NULL", "absent IS NULL", "country IS NOT NULL",
			"country = 'UK' AND missing IS NULL", "country = 'France' OR weight IS NOT NULL",
			"NOT missing IS NOT NULL",
		},
		no: []string{
			"country IS NULL", "missing IS NOT NULL", "absent IS NOT NULL",
			"missing > 0", "0 < missing", "0 > absent", "0 = missing", "missing >= 0", "missing < 0",
			"missing <= 0", "missing = 0", "missing <> 0", "0 != missing", "missing = missing",
			"absent = absent", "missing AND TRUE", "missing OR FALSE",
			"NOT missing = 0", "NOT missing <> 0", "NOT absent > 0", "NOT -absent = 0",
			"NOT absent + 1 = 1", "NOT (absent / 1 = 1)", "NOT absent % 2 = 1",
		},
	}.run(t)
}

func TestLiterals(t *testing.T) {
	cases{m: withHeaders(appProps()),
		yes: []string{
			"5 = 5", "weight = 5", "10.5 = 10.5", "price = 10.5", "5.0 > 4.999", "0 = 0.0",
			"weight = 5.0", "5.0 = weight", "'UK' = 'UK'", "country = 'UK'",
			"TRUE = TRUE", "active = TRUE", "TRUE", "active", "FALSE = FALSE", "premium = FALSE",
			"weight + 2 > 6", "price * 2 > 20.0", "'UK' <> 'US'",
			"temperature = -5.5 + 0.5",
		},
		no: []string{"FALSE", "premium", "5", "'UK'", "0x01", "weight"},
	}.run(t)
}

func TestScientificNotation(t *testing.T) {
	cases{m: withHeaders(appProps()),
		yes: []string{
			"distance = 1.2E6", "distance = 1200000.0", "tiny_value = 3.5E-4", "tiny_value = 0.00035",
			"1.2E3 = 1200", "5.0E2 = 500", "5.0E+2 = 500", "5.0E-2 = 0.05", "-5.0E-2 = -0.05", "1.0E0 = 1",
			"distance / 1.2E5 = 10", "tiny_value * 1.0E+6 = 350", "1.5E2 + 2.5E2 = 400", "3.0E3 - 2.0E3 = 1000",
			"distance > 1.0E6", "tiny_value < 1.0E-3",
			"distance / 1200 = 1000", "large_value + tiny_value >= large_value",
			"large_value + large_value > large_value",
		},
	}.run(t)
}

func TestPrecedence(t *testing.T) {
	cases{m: withHeaders(appProps()),
		yes: []string{
			"weight + 2 * 3 = 11", "(weight + 2) * 3 = 21",
			"weight + weight * quantity - -temperature / 2 = 502.5",
			"NOT country = 'US' AND weight > 3", "weight > 3 AND NOT country = 'US'",
			"NOT (country = 'US' AND weight > 3)",
			"NOT country = 'US' OR country = 'France' AND weight > 3",
			"country = 'France' AND weight > 3 OR NOT country = 'US'",
			"weight * 2 > 5 + 3", "weight = -(-81) % percentage -1",
			"weight -(-2.0) = -(-81) % (percentage -1)",
			"price < 20 OR country = 'US' AND weight > 3",
			"weight > 3 AND price < 20 OR country = 'US'",
			"((weight > 3) AND (price < -1)) OR ((country = 'UK') AND (city = 'London'))",
			"weight > 3 AND price < -1 OR country = 'UK' AND city = 'London'",
			"(weight + (price * 2)) > (score + 15)",
			"(weight = 5) = TRUE", "(weight = 6) = FALSE", "(weight = 5) <> (weight = 6)",
		},
		no: []string{"weight > 3 AND (price > 20 OR country = 'US')"},
	}.run(t)
}

func TestTypes(t *testing.T) {
	cases{m: withHeaders(appProps()),
		yes: []string{
			"weight = 5", "weight = 5.0", "price = 10.5", "active = TRUE", "active <> FALSE",
			"description LIKE '%test%'",
			"weight + price = 15.5", "weight * discount = 1.25",
			"0.0 / 1 = 0",
		},
		no: []string{
			"country = 5", "weight = 'UK'", "TRUE = 1", "active = 1", "TRUE = 'TRUE'", "active = 'TRUE'",
			"weight LIKE '5'",
			"weight / 0 > 0", "weight / score = 5", "0 / 0 = 0", "0 / 0.0 = 0", "-1 / 0 = 0",
			"score / score = score", "NOT weight / 0 > 0", "NOT weight / 0.0 = 1",
			"country + weight = 'UK5'", "active + premium = 1",
		},
	}.run(t)
}

// TestNumbers covers what int64 and float64 alone would get wrong:
// RabbitMQ's integers have no bound and compare exactly with floats.
func TestNumbers(t *testing.T) {
	m := withHeaders(map[string]any{
		"max":    int64(math.MaxInt64),
		"min":    int64(math.MinInt64),
		"umax":   uint64(math.MaxUint64),
		"big53":  int64(1<<53 + 1),
		"f32":    float32(0.1),
		"posinf": math.Inf(1),
		"nonum":  math.NaN(),
		"i8":     int8(-3), "i": -3, "u": uint(3), "u8": uint8(3),
		"ts":   time.UnixMilli(1311704463521),
		"list": []any{1, 2},
		"map":  map[string]any{"a": 1},
	})
	cases{m: m,
		yes: []string{
			"max + 1 = 9223372036854775808", "max + 1 > max", "min - 1 < min", "-min = 9223372036854775808",
			"umax = 18446744073709551615", "umax > max", "umax - max = 9223372036854775808",
			"max * max > max", "umax % 10 = 5", "umax % max = 1",
			"99999999999999999999999 > 1.0E22", "99999999999999999999999 > 1.0E23", // 1.0E23 is 99999999999999991611392
			"big53 > 9007199254740992.0", "big53 <> 9007199254740992.0", // exact, not rounded to a float
			"f32 <> 0.1", "f32 > 0.1",
			"i8 = i", "u = u8", "i8 + u = 0",
			"ts = 1311704463521",
			"posinf IS NULL", "nonum IS NULL", "list IS NULL", "map IS NULL", // types RabbitMQ does not filter on are left out
			"-9223372036854775808 = min", "min % -1 = 0", "min / -1 = 9223372036854775808",
		},
		no: []string{
			"max = max + 1", "umax = -1", "big53 = 9007199254740992.0", "99999999999999999999999 <= 1.0E23",
			"1.0E300 * 1.0E300 > 0", "NOT 1.0E300 * 1.0E300 > 0", // a float overflow is UNKNOWN
			"umax * 1.0E300 > 0",
			"99999999999999999999999 % 0 = 0",
		},
	}.run(t)
}

func TestCaseSensitivity(t *testing.T) {
	h := appProps()
	h["COUNTRY"], h["Weight"] = "France", uint32(10)
	cases{m: withHeaders(h),
		yes: []string{
			"country = 'UK'", "COUNTRY = 'France'", "Weight = 10",
			"country = 'UK' AND COUNTRY = 'France' AND weight < 6 AND Weight = 10",
		},
		no: []string{"COUNTRY = 'UK'", "country = 'France'", "weight = 10", "WEIGHT = 5"},
	}.run(t)
}

func TestWhitespace(t *testing.T) {
	cases{m: withHeaders(appProps()),
		yes: []string{
			"country = 'UK'", "country    =    'UK'", "country\t=\t'UK'", "country\f=\f'UK'",
			"country\n=\n'UK'", "country\r=\r'UK'", "country \t\f\n\r = \t\f\n\r 'UK'",
			"country\t=\t'UK'\nAND\rweight\f>\t3", "country='UK'AND weight=5",
			" \t\n\r country = 'UK' \t\n\r ",
		},
	}.run(t)
}

func TestIdentifiers(t *testing.T) {
	ids := []string{"simple", "x", "with_underscore_123", "🥕", "ニンジン", "with    four    spaces", " ", "",
		"NOT", "not", "AND", "OR", "IN", "NULL", "-", "+", "FALSE", "!@#$%^&*()_+~`|{}?<>",
		"[ key ]", "[[key]]", "]", "][", "[]", "properties.to", "p.to", "order-status", "注文状況", "and", "BETWEEN"}
	h := map[string]any{}
	for _, id := range ids {
		h[id] = true
	}
	m := withHeaders(h)
	m.To = "q1"
	cases{m: m,
		yes: []string{
			"simple", "x", "with_underscore_123", "application_properties.with_underscore_123",
			"a.with_underscore_123", "[with_underscore_123]",
			"[🥕]", "[ニンジン]", "[with    four    spaces]", "[ ]", "[]", "[NOT]", "[not]", "[AND]", "[OR]",
			"[IN]", "[NULL]", "[-]", "[+]", "[FALSE]", "[!@#$%^&*()_+~`|{}?<>]",
			"[[[ key ]]]", "[[[[[key]]]]]", "[]]]", "[]][[]", "[[[]]]",
			"properties.to = 'q1'", "p.to = 'q1'", "[properties.to] = TRUE", "[p.to] = TRUE",
			"[order-status]", "[注文状況]", "a.and", "BETWEEN", "[]=TRUE",
		},
		no: []string{"[order status]", "[[[key]]]"},
	}.run(t)
}

func TestHeaderSection(t *testing.T) {
	cases{m: &messages.Message{Priority: 7},
		yes: []string{"h.priority > 5", "h.priority = 7", "header.priority = 7", "4 < header.priority"},
		no:  []string{"h.priority < 7", "h.priority IS NULL"},
	}.run(t)
	// Priority 0 is "not set", which RabbitMQ reads as AMQP's default 4.
	cases{m: &messages.Message{}, yes: []string{"h.priority = 4"}}.run(t)
	cases{m: nil, yes: []string{"h.priority = 4", "p.subject IS NULL", "x IS NULL"}, no: []string{"x = 1"}}.run(t)
}

func TestPropertiesSection(t *testing.T) {
	m := &messages.Message{
		MessageID:          "id-123",
		UserID:             []byte{10, 11, 12},
		To:                 "to some queue",
		Subject:            "some subject",
		ReplyTo:            "reply to some topic",
		CorrelationID:      uint64(789),
		ContentType:        "text/plain",
		ContentEncoding:    "deflate",
		AbsoluteExpiryTime: time.UnixMilli(1311999988888),
		CreationTime:       time.UnixMilli(1311704463521),
		GroupID:            "some group ID",
		GroupSequence:      999,
		ReplyToGroupID:     "other group ID",
		Headers:            map[string]any{"key_1": int8(-1)},
		Priority:           7,
	}
	cases{m: m,
		yes: []string{
			"p.message_id = 'id-123'", "p.message_id LIKE 'id-%'", "p.message_id IN ('id-123', 'id-456')",
			"p.user_id = 0x0A0B0C",
			"p.to = 'to some queue'", "p.to LIKE 'to some%'", "p.to NOT LIKE '%topic'",
			"p.subject = 'some subject'", "p.subject LIKE '%subject'", "p.subject IN ('some subject', 'other subject')",
			"p.reply_to = 'reply to some topic'", "p.reply_to LIKE 'reply%topic'",
			"p.correlation_id = 789", "500 < p.correlation_id",
			"p.content_type = 'text/plain'", "p.content_type LIKE 'text/%'", "p.content_type IN ('text/plain', 'text/html')",
			"'deflate' = p.content_encoding", "p.content_encoding NOT IN ('gzip', 'compress')",
			"p.absolute_expiry_time = 1311999988888", "p.absolute_expiry_time > 1311999988000",
			"p.creation_time = 1311704463521", "p.creation_time < 1311999988888",
			"p.group_id = 'some group ID'", "p.group_id LIKE 'some%ID'",
			"p.group_sequence = 999", "p.group_sequence >= 999", "p.group_sequence % 3 = 0",
			"p.reply_to_group_id = 'other group ID'", "p.reply_to_group_id LIKE '%group ID'",
			"p.reply_to_group_id != 'some group ID'", "p.reply_to_group_id IS NOT NULL",
			"p.message_id = 'id-123' AND 'some subject' = p.subject",
			"p.group_sequence < 500 OR p.correlation_id > 700",
			"(p.content_type LIKE 'text/%') AND p.content_encoding = 'deflate'",
			"properties.message_id = 'id-123'", "properties.group_sequence > 90",
			"-1.0 = key_1 AND 4 < header.priority AND properties.group_sequence > 90",
			"application_properties.key_1 = -1", "a.key_1 = -1", "key_1 = -1",
		},
		no: []string{
			"'id-123' != p.message_id", "p.user_id = 0xFF", "p.reply_to LIKE 'reply%queue'",
			"p.correlation_id < 700", "p.content_encoding = 'gzip'", "p.group_id = 'other group ID'",
			"p.group_sequence > 999", "p.reply_to_group_id IS NULL",
			"-1.0 = key_1 AND 4 < header.priority AND properties.group_sequence < 90",
		},
	}.run(t)
	// What the wire leaves out is NULL.
	cases{m: &messages.Message{},
		yes: []string{
			"p.subject IS NULL", "p.message_id IS NULL", "p.user_id IS NULL", "p.to IS NULL",
			"p.reply_to IS NULL", "p.correlation_id IS NULL", "p.content_type IS NULL",
			"p.content_encoding IS NULL", "p.absolute_expiry_time IS NULL", "p.creation_time IS NULL",
			"p.group_id IS NULL", "p.group_sequence IS NULL", "p.reply_to_group_id IS NULL",
			"p.creation_time IS NULL AND UTC() > 0",
		},
		no: []string{"p.subject IS NOT NULL", "p.subject = ''"},
	}.run(t)
	// Message ids of every kind the messages package carries.
	for _, c := range []struct {
		id   any
		expr string
	}{
		{uint64(12345), "p.message_id = 12345"},
		{uint64(math.MaxUint64), "p.message_id = 18446744073709551615"},
		{[]byte{0x01, 0x23, 0xAB}, "p.message_id = 0x0123AB"},
		{[]byte{}, "p.message_id = '' AND p.message_id IS NOT NULL"},
		{uuid{0xFF}, "p.message_id = 0xFF000000000000000000000000000000"},
		{symbol("s"), "p.message_id = 's'"},
	} {
		cases{m: &messages.Message{MessageID: c.id, CorrelationID: c.id},
			yes: []string{c.expr, strings.ReplaceAll(c.expr, "message_id", "correlation_id")}}.run(t)
	}
}

func TestUTC(t *testing.T) {
	before := time.Now().Add(-30 * time.Second)
	m := withHeaders(appProps())
	m.CreationTime = before
	m.AbsoluteExpiryTime = before.Add(time.Hour)
	m.Headers["ts1"] = before
	cases{m: m,
		yes: []string{
			"UTC() > 1000000000000", "UTC() < 9999999999999", "UTC() < UTC() + 30000", "UTC() > UTC() - 30000",
			"UTC() >= p.creation_time", "p.creation_time <= UTC()", "UTC() < p.absolute_expiry_time",
			"p.absolute_expiry_time > UTC()", "UTC() - properties.creation_time < 300000",
			"country = 'UK' AND UTC() > 0", "(FALSE OR p.creation_time < UTC()) AND weight = 5",
			"ts1 < UTC()",
			"UTC()>=p.creation_time", "UTC () >= p.creation_time", "UTC ( ) >= p.creation_time",
			"  UTC   (   )   >=   p.creation_time", "(UTC()) >= p.creation_time", "( UTC () ) >= p.creation_time",
			"p.absolute_expiry_time IS NULL OR p.absolute_expiry_time > UTC()",
		},
		no: []string{"p.creation_time >= UTC()"},
	}.run(t)
}

func TestComplexExpressions(t *testing.T) {
	cases{m: withHeaders(appProps()),
		yes: []string{
			"country = 'UK' AND price > 10.0 AND description LIKE '%test%' AND 2 = 101 % 3",
			"(country IN ('UK', 'US') OR city = 'London') AND (weight * 2 >= 10) AND NOT premium",
			"price * quantity * (1 - discount) > 500",
			"country = 'UK' AND (city = 'London' OR description LIKE '%test%') AND" +
				"(weight > 3 OR premium = TRUE) AND price <= 20",
			"percentage >= 0 AND percentage <= 100 AND weight + temperature = 0",
			"((country = 'UK' OR country = 'US') AND (city IN ('London', 'New York', 'Paris'))) OR " +
				"(price * (1 - discount) < 10.0 AND quantity > 50 AND description LIKE '%test%') OR " +
				"(active AND NOT premium)",
		},
	}.run(t)
}

// TestDocExamples runs each example of RabbitMQ's stream filtering guide
// ("SQL Filter Expressions").
func TestDocExamples(t *testing.T) {
	m := &messages.Message{
		MessageID:       uint64(12345),
		UserID:          []byte("Bob"),
		To:              "orders",
		Subject:         "Order 42",
		ReplyTo:         "/queues/q1",
		CorrelationID:   "c",
		ContentType:     "application/json",
		ContentEncoding: "zstd",
		CreationTime:    time.UnixMilli(1753365622000),
		GroupID:         "Group A",
		GroupSequence:   9,
		ReplyToGroupID:  "Group B",
		Priority:        4,
		Headers: map[string]any{
			"color": "blue", "order_status": "pending", "order-status": "pending",
			"order status": "pending", "注文状況": "pending", "age": 25, "temperature": -5.5,
			"value": 1.23e6, "active": true, "deleted": false, "name": "Alice",
			"city": "New York", "quote": "It's great", "emojis": "😎☀️", "cancelled": false,
			"category": "books", "price": 10, "status": "new", "region": "emea",
			"customer_id": 12345, "discount": 0.25, "quantity": 5, "stock_level": 9,
			"total": 100, "balance": 50, "product": "John Quincy Doe",
			"email": "x@example.com", "code": "xyzABC", "underscored": "_foo",
			"environment": "PROD",
		},
	}
	cases{m: m,
		yes: []string{
			"header.priority = 4", "h.priority = 4",
			"properties.message_id = 12345", "p.user_id = 0x426F62", "p.to = 'orders'",
			"p.subject LIKE 'Order%'", "p.reply_to = '/queues/q1'", "p.correlation_id IS NOT NULL",
			"p.content_type = 'application/json'", "p.content_encoding IN ('gzip', 'zstd', 'deflate')",
			"p.creation_time < 1753365622460", "p.group_id = 'Group A'", "p.group_sequence % 3 = 0",
			"p.reply_to_group_id = 'Group B'",
			"application_properties.color = 'blue'", "a.color = 'blue'", "color = 'blue'",
			"age = 25", "temperature = -5.5", "value = 1.23E6", "active = TRUE", "deleted = FALSE",
			"name = 'Alice'", `city = "New York"`, "quote = 'It''s great'", "emojis = '😎☀️'",
			"properties.subject = 'Order 42'", "order_status = 'pending'",
			"[order-status] = 'pending'", "[order status] = 'pending'", "[注文状況] = 'pending'",
			"header.priority > 3 AND properties.subject = 'Order 42'",
			"status = 'new' OR status = 'pending'", "NOT cancelled",
			"(category = 'books' OR category = 'music') AND price < 20",
			"customer_id = 12345", "status <> 'cancelled'", "region != 'EU'", "age > 18",
			"p.creation_time >= 1753365622000", "quantity < 10", "discount <= 0.25",
			"quantity + 5 > stock_level", "price - discount > 9", "quantity * price > 10",
			"total / quantity < 50", "p.group_sequence % 2 = 1",
			"balance < +100", "balance > -100",
			"p.reply_to IS NOT NULL", "category IS NOT NULL",
			"name LIKE 'Al%'", "name NOT LIKE 'John%'", "product LIKE 'John % Doe'",
			"email LIKE '%@example.com'", "code LIKE '___ABC'", `underscored LIKE '\_%' ESCAPE '\'`,
			"status IN ('new', 'pending', 'processing')", "environment NOT IN ('DEV', 'STAGING')",
			"p.absolute_expiry_time IS NULL OR p.absolute_expiry_time > UTC()",
			"p.user_id = 'Bob' AND p.subject LIKE 'Order%' AND region = 'emea'",
		},
		no: []string{"p.absolute_expiry_time > UTC()", "firstname + lastname = 'JohnDoe'"},
	}.run(t)
}

// TestConcurrentMatch lets -race see a Filter shared between goroutines.
func TestConcurrentMatch(t *testing.T) {
	f, err := Parse("country = 'UK' AND description LIKE '%t_st%' AND weight / 2 > 2")
	require.NoError(t, err)
	done := make(chan bool)
	for range 4 {
		go func() {
			ok := true
			for range 100 {
				ok = ok && f.Match(withHeaders(appProps()))
			}
			done <- ok
		}()
	}
	for range 4 {
		require.True(t, <-done)
	}
}
